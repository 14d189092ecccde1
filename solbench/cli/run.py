"""`solbench run`: evaluate solutions (or references) on problems and write traces."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from solbench.languages import solution_file_suffixes
from solbench.orchestrator.config import (
    RunConfig,
    auto_fallback_note,
    choose_devices,
    configure,
    devices_from_options,
)
from solbench.orchestrator.jobs import Job, build_jobs, repo_default
from solbench.orchestrator.options import add_options, given_options
from solbench.orchestrator.timeline import RunTimeline
from solbench.report.table import output_console, print_results
from solbench.report.traces import TraceFile, default_trace_path
from solbench.spec.errors import SpecError

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "run", help="evaluate a solution (or the reference) on a problem or a whole dataset",
        description="With no PROBLEM: run the shipped example solutions (solutions/) on the shipped problems "
                    "(problem_defs/). With a dataset folder and no --solution: every problem's reference.")
    p.add_argument("problem", nargs="?", type=Path, help="problem folder, or a folder of problems (dataset)")
    p.add_argument("--solution", "-s", type=Path, action="append",
                   help="solution file (.json, .py, .cu) or folder of them; repeatable")
    p.add_argument("-o", "--output", type=Path, help="append traces here (JSON Lines); re-running resumes "
                                                    "(default: a new file under .solbench/runs/)")
    p.add_argument("--json", action="store_true", help="print traces as JSON lines on stdout instead of tables")
    add_options(p.add_argument, "cli")  # every run option, from the one table (RunConfig's fields)
    p.add_argument("--devices", help="comma-separated CUDA device indices to spread the work over "
                                      "(default: all visible when --device is auto or cuda)")
    p.add_argument("--timeline", action="store_true",
                   help="print, at the end (stderr), when the run reached each stage: seconds since the process "
                        "started, to see the start-up and tear-down outside the progress bar")
    p.set_defaults(func=run_command)


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The command line's options, named as every door names them (`orchestrator.config.configure`)."""
    return configure(**given_options(lambda dest: getattr(args, dest), "cli"))


def job_target(args: argparse.Namespace) -> tuple[Path, list[Path] | None]:
    """(problem or dataset folder, solutions) the command line names; no PROBLEM: the shipped solutions on
    the shipped problems. A target that does not exist stops here, before a cluster is started."""
    if args.problem is None:
        target, solutions = repo_default("problem_defs"), args.solution or [repo_default("solutions")]
        if not target.is_dir():
            raise SpecError("no PROBLEM given and no shipped problem_defs/ found")
    else:
        target, solutions = args.problem, args.solution
    if not target.exists():
        raise SpecError(f"{target} does not exist; NVIDIA's dataset is fetched with `solbench pull "
                        f"nvidia/SOL-ExecBench -o {target}` (network), or converted offline from a local copy with "
                        f"`solbench pull --from-parquet FILE.parquet -o {target}`")
    if target.is_file() and target.suffix in solution_file_suffixes() and target.name != "definition.json":
        raise SpecError(f"{target} is a file, not a problem folder: did you mean `--solution {target}`?")
    return target, solutions


def jobs_from_args(args: argparse.Namespace, config: RunConfig, unloadable: list[str]) -> list[Job]:
    """The jobs the command line asks for; a dataset's problems that cannot be loaded go to `unloadable`."""
    target, solutions = job_target(args)
    return build_jobs(target, solutions, config.max_workloads, unloadable)


def begin_cluster(config: RunConfig):
    """With --cluster: connect (or start a local Ray) and start the session actors now, so they come up
    while the jobs are built; None without --cluster."""
    if not config.cluster:
        return None
    from solbench.orchestrator.cluster import ClusterLaunch  # inner: ray is an optional extra

    return ClusterLaunch(config)


def open_trace_file(output: Path | None, console: Console) -> TraceFile | None:
    """-o FILE (resumed when it has traces), else a new file under .solbench/runs/ so that a run's traces,
    with every log, outlive its table; a folder that cannot be written to only costs that file."""
    if output is not None:
        trace_file = TraceFile(output)
        if trace_file.refused_lines:
            console.print(f"[yellow]warning:[/yellow] {trace_file.refused_lines} line(s) of {output} were not written "
                          f"by solbench (no valid signature): refused, moved to {trace_file.refused_path}, and their "
                          f"workloads evaluated again")
        elif trace_file.unsigned:
            console.print(f"[yellow]note:[/yellow] {output} was written before traces were signed: its lines are "
                          f"trusted as they are")
        return trace_file
    path = default_trace_path()
    try:
        return TraceFile(path)
    except OSError as exc:
        console.print(f"[yellow]warning:[/yellow] cannot keep the traces in {path.parent} ({exc}); "
                      f"pass -o FILE to keep them")
        return None


def done_traces(jobs: list[Job], trace_file: TraceFile | None) -> list:
    """The traces of these jobs' workloads already in the trace file, one per workload: a resumed run's
    progress starts at their count, and its tables show them with the new ones."""
    if trace_file is None or not trace_file.done_count:
        return []
    wanted = {(job.problem.name, job.resolved_solution().content_hash(), w.uuid) for job in jobs for w in job.workloads}
    latest = {t.key(): t for t in trace_file.earlier if t.key() in wanted}
    return list(latest.values())


def shown_path(path: Path) -> str:
    """A path as the user would type it: relative to the working directory when it is under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def run_command(args: argparse.Namespace) -> int:
    console = Console(stderr=True, soft_wrap=True)  # messages never broken at 80 columns in a log
    timeline = RunTimeline()
    timeline.mark("cli")
    launch = None
    workers: list = []  # the devices' worker pairs, started early; the run takes them, else killed below
    try:
        try:
            workers = start_workers_early(args, devices_from_options(args.device or RunConfig.device, args.devices,
                                                                          args.cluster),
                                          timeline)
            config = config_from_args(args)
            devices = choose_devices(config, args.devices)
            timeline.mark("devices")
            job_target(args)
            launch = begin_cluster(config)
            if launch is not None:
                timeline.mark("first_spawn")  # the session actors are starting
            elif [w[0].device for w in workers] != devices:  # not the devices the run is on after all
                workers = swap_workers(workers, devices, timeline)
            unloadable: list[str] = []
            jobs = jobs_from_args(args, config, unloadable)
            for message in unloadable:
                console.print(f"[red]problem not loaded:[/red] {escape(message)}")
            if config.lock_clocks and not config.cluster and not any(d.startswith("cuda") for d in devices):
                raise SpecError("--lock-clocks needs a CUDA GPU")
            trace_file = open_trace_file(args.output, console)
            timeline.mark("jobs")
        except (SpecError, OSError) as exc:
            console.print(f"[red]error:[/red] {escape(str(exc))}")
            return EXIT_BAD_INPUT
        code = run_and_report(args, config, jobs, devices, trace_file, console, launch, timeline, workers)
        if unloadable and code != EXIT_INTERRUPTED:
            console.print(f"{len(unloadable)} problem(s) could not be loaded (above): not run")
            return EXIT_FAILED if code == EXIT_OK else code
        return code
    finally:
        if workers:  # the run stops the workers it took; these are the ones it never got (or already stopped)
            from solbench.orchestrator.scheduler import kill_workers

            kill_workers(workers)
        if launch is not None:  # a run that ended early (bad input, Ctrl-C) before the cluster run took it
            launch.close()
        timeline.mark("exit")
        if args.timeline:
            console.print(timeline.line(), markup=False, highlight=False)


def start_workers_early(args: argparse.Namespace, devices: list[str] | None, timeline: RunTimeline) -> list:
    """A local run's worker pairs, started before this process imports torch or builds the jobs (seconds
    of start-up that then overlap those), where the options alone name the devices; else none yet."""
    if not devices:
        return []
    try:
        job_target(args)  # a target that does not exist is reported below, with no worker started for it
    except SpecError:
        return []
    from solbench.orchestrator.scheduler import start_device_workers  # light: no torch

    return start_device_workers(devices, timeline)


def swap_workers(workers: list, devices: list[str], timeline: RunTimeline) -> list:
    """The worker pairs for `devices`, started now (before the jobs are built), in place of any started
    for a guess that turned out wrong."""
    from solbench.orchestrator.scheduler import kill_workers, start_device_workers

    kill_workers(workers)
    return start_device_workers(devices, timeline)


def run_and_report(args: argparse.Namespace, config: RunConfig, jobs: list[Job], devices: list[str],
                   trace_file: TraceFile | None, console: Console, launch, timeline: RunTimeline,
                   workers: list) -> int:
    """Run the jobs with a progress display, then the tables; the exit code."""
    note = auto_fallback_note(config, devices)
    if note:
        console.print(note)
    total, earlier = sum(len(j.workloads) for j in jobs), done_traces(jobs, trace_file)
    done = len(earlier)
    if done:
        console.print(f"resuming: {done} of {total} workloads already in {shown_path(trace_file.path)}")
    console.print(f"{len(jobs)} job(s), {total} workload(s) on {', '.join(devices)}")
    if launch is not None:
        console.print(f"Ray {'started' if launch.started_ray else 'connected'} in {launch.connect_s:.1f} s; "
                      f"{len(launch.slots)} session actor(s) starting")
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=console, transient=False, disable=args.json and not console.is_terminal)
    task = progress.add_task("evaluating", total=total, completed=done)
    finished: list = []
    where: dict[int, str] = {}  # id(job) -> the node/device running it (a cluster run: one bar per node)
    node_tasks: dict[str, int] = {}

    def on_trace(job, trace) -> None:
        finished.append(trace)
        if args.json:
            sys.stdout.write(json.dumps(trace.to_dict(), allow_nan=False) + "\n")
            sys.stdout.flush()
        progress.update(task, advance=1, description=f"{trace.definition[:40]} {trace.status.value}")
        if id(job) in where and config.cluster:
            progress.update(node_tasks[where[id(job)]], advance=1)

    def on_job_start(job, device) -> None:
        where[id(job)] = device
        if config.cluster and device not in node_tasks:
            node_tasks[device] = progress.add_task(f"  {device}", total=None)
        progress.update(task, description=f"{job.problem.name[:40]} on {device}")

    # Imported once the options are known to be good (a local run's scheduler imports torch when it runs).
    from solbench.cli import stop_requested
    from solbench.orchestrator.scheduler import run_jobs
    from solbench.timing.clock_lock import ClockLockError

    try:
        with progress:
            traces = run_jobs(jobs, config, devices, trace_file=trace_file, on_trace=on_trace,
                              on_job_start=on_job_start, launch=launch, timeline=timeline,
                              workers=workers, stop=stop_requested)
    except ClockLockError as exc:
        console.print(f"[red]error:[/red] --lock-clocks: {exc}")
        return EXIT_BAD_INPUT
    except SpecError as exc:  # a cluster that cannot be reached or has no actor left: what finished is kept
        if finished:
            report_results(finished, args.json, console, trace_file, interrupted=True, earlier=earlier)
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        report_results(finished, args.json, console, trace_file, interrupted=True, earlier=earlier)
        return EXIT_INTERRUPTED
    if stop_requested.is_set():  # a signal whose KeyboardInterrupt was lost on the way (cli.stop_requested)
        report_results(finished, args.json, console, trace_file, interrupted=True, earlier=earlier)
        return EXIT_INTERRUPTED
    code = report_results(traces, args.json, console, trace_file, earlier=earlier)
    timeline.mark("report")
    return code


def report_results(traces: list, as_json: bool, console: Console, trace_file: TraceFile | None, *,
                   interrupted: bool = False, earlier: list | None = None) -> int:
    """The tables (stdout), why each failed or skipped workload did so, where the traces are; the exit code.
    A resumed run's tables, counts and exit code take in the `earlier` traces of its workloads too."""
    new = len(traces)
    traces = list(earlier or []) + list(traces)
    if not as_json and traces:
        print_results(output_console(), traces)
    failed = sum(t.status.failed for t in traces)
    passed = sum(not t.status.failed for t in traces)
    written = trace_file is not None and Path(trace_file.path).is_file()  # never name a file that was not made
    where = f"traces in {shown_path(trace_file.path)}" if written else "no traces kept"
    if interrupted:
        resume = f"; re-run with -o {shown_path(trace_file.path)} to resume" if written else ""
        console.print(f"interrupted: {new} finished workload(s) kept ({where}){resume}")
        return EXIT_INTERRUPTED
    resumed = f" ({len(traces) - new} from before this run)" if len(traces) > new else ""
    console.print(f"{passed}/{len(traces)} workloads passed or skipped{resumed}; {failed} failed; {where}")
    return EXIT_FAILED if failed else EXIT_OK
