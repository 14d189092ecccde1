"""`solbench submit`: `solbench run` on a `solbench serve` (the same options, tables, trace file and exit codes)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields

from rich.console import Console
from rich.markup import escape

from solbench.cli import run
from solbench.orchestrator.config import RunConfig
from solbench.spec.errors import SpecError

# Options of `solbench run` that belong to the service (it fixed them when it started) or to run alone.
NOT_SENT = {"device", "cluster", "cluster_actors", "lock_clocks"}


def register(subparsers) -> None:
    scratch = argparse.ArgumentParser(add_help=False)
    run.register(scratch.add_subparsers())
    run_parser = next(a for a in scratch._actions if isinstance(a, argparse._SubParsersAction)).choices["run"]
    p = subparsers.add_parser(
        "submit", parents=[run_parser], conflict_handler="resolve",
        help="evaluate a solution on a `solbench serve` (takes run's options; docs/agents.md)",
        description="Send a problem (by content) and a solution to a running `solbench serve`, stream its traces "
                    "into -o FILE, print run's tables. Device, cluster and clock options are the service's.")
    for action in p._actions:
        if action.dest == "problem":  # one problem, required (run's is optional: a dataset, or the shipped ones)
            action.nargs, action.required, action.help = None, True, "problem folder (sent by content)"
        elif action.dest in ("device", "devices", "cluster", "cluster_actors", "lock_clocks", "timeline"):
            action.help = argparse.SUPPRESS  # the service's, not a submission's
    p.add_argument("--server", default=None, help="the service's URL (default: $SOLBENCH_SERVER, else "
                                                  "http://127.0.0.1:8470)")
    p.add_argument("--token-file", help="a file whose first line is the service's token (-: stdin; default: "
                                        "$SOLBENCH_TOKEN)")
    p.add_argument("--token", help="deprecated: the token on the command line, readable by every process of the "
                                   "host; use --token-file or $SOLBENCH_TOKEN")
    p.set_defaults(func=submit_command)


def sent_options(config: RunConfig) -> dict:
    """The options that differ from a run's defaults, as JSON (the service applies them to its own)."""
    default = RunConfig()
    options = {}
    for f in fields(RunConfig):
        value = getattr(config, f.name)
        if f.name not in NOT_SENT and value != getattr(default, f.name):
            options[f.name] = [str(p) for p in value] if f.name == "data_roots" else value
    return options


def submit_command(args: argparse.Namespace) -> int:
    from solbench.serve.client import Client, ServiceError  # inner: only this command talks HTTP

    console = Console(stderr=True, soft_wrap=True)
    if len(args.solution or []) > 1 or (args.solution and args.solution[0].is_dir()):
        console.print("[red]error:[/red] solbench submit takes one solution file (--solution FILE)")
        return run.EXIT_BAD_INPUT
    from solbench.serve.auth import read_token

    try:
        token = read_token(args.token, args.token_file, warn=lambda text: console.print(f"warning: {text}"))
    except ValueError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return run.EXIT_BAD_INPUT
    client = Client(args.server, token)
    submission = None
    try:
        config = run.config_from_args(args)
        if config.device != "auto" or config.cluster or config.lock_clocks or args.devices:
            raise SpecError("--device, --devices, --cluster and --lock-clocks are the service's (solbench serve's options)")
        trace_file = run.open_trace_file(args.output, console)
        submission = client.submit(args.problem, args.solution[0] if args.solution else None,
                                   **sent_options(config))
        console.print(f"submitted {submission} to {client.url}")
        traces = []
        for trace in client.stream(submission):
            traces.append(trace)
            if trace_file is not None:
                trace_file.append(trace)
            if args.json:
                sys.stdout.write(json.dumps(trace.to_dict(), allow_nan=False) + "\n")
                sys.stdout.flush()
        ended = client.poll(submission, since=len(traces))
    except (SpecError, OSError, ServiceError) as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        return run.EXIT_BAD_INPUT
    except KeyboardInterrupt:
        if submission is not None:
            try:
                client.cancel(submission)
            except ServiceError:
                pass
        console.print("interrupted: the submission was cancelled")
        return run.EXIT_INTERRUPTED
    if ended["state"] != "done":
        console.print(f"[red]the submission ended {ended['state']}[/red]" + (f": {ended['error']}" if ended.get("error") else ""))
        run.report_results(traces, args.json, console, trace_file, interrupted=True)
        return run.EXIT_FAILED
    return run.report_results(traces, args.json, console, trace_file)
