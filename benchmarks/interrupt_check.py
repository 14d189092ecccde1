"""Interrupt `solbench run`, `serve`, `submit`, `gate` and `extract` at random moments and check that each ends cleanly.

    python benchmarks/interrupt_check.py       # 50 runs, 10 serves, 10 submits, 5 gates, 5 extracts (issue 48)
    python benchmarks/interrupt_check.py --runs 5 --serves 0 --submits 0 --gates 0 --extracts 0 --seed 7

Each interruption is Ctrl-C (SIGINT to the command's whole process group, as a terminal sends it) or SIGTERM (to the
command's process), after a random delay. Checked every time: no traceback in what it printed; the exit status of
its signal, 130 after Ctrl-C and 143 after SIGTERM (or 0 where it had finished, `gate` also 1, its verdict; `serve`
exits the same way after a clean stop; killed by the signal before Python could handle it counts as the shell's
128 + N); no process it started left running (found by a marker in their environment); every line of the traces file parses and, for `run`, as many as the command said it kept (all of
its workloads when it had finished); every `traces in FILE` and `verdict in FILE` it printed names a file that exists.
`tests/test_interrupts.py` runs a few of the same. The count of submit traces is checked when it finished.

Deadlines are for a loaded machine (2 cores shared with other work): a command gets `--grace-s` (default 300 s)
to end after its signal and its processes as long again to be gone, a service as long to start listening.
Only a command that outlives them counts as failed; how long each took is printed, not judged.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "problem_defs" / "core" / "layernorm_fp32_h1024"
MARK = "SOLBENCH_INTERRUPT_MARK"
SIGNALS = (signal.SIGINT, signal.SIGTERM)
KEPT_RE = re.compile(r"(\d+) finished workload\(s\) kept")
NAMED_RE = re.compile(r"(?:traces|verdict) in (\S+?)[;),\s]")
GRACE_S = 300.0  # --grace-s: how long a command may take to end, or its processes to be gone, on a loaded machine


@dataclass
class Outcome:
    command: str
    signal_name: str
    delay_s: float
    code: int | None = None
    problems: list[str] = field(default_factory=list)
    ended_s: float | None = None  # from the signal to the command's exit

    def line(self) -> str:
        state = "ok" if not self.problems else "FAIL: " + " | ".join(self.problems)
        ended = f", ended {self.ended_s:5.1f} s after it" if self.ended_s is not None else ""
        return f"{self.command:7} {self.signal_name:7} after {self.delay_s:5.2f} s{ended}: exit {self.code}  {state}"


def child_env(marker: str) -> dict[str, str]:
    env = dict(os.environ, **{MARK: marker})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env.pop("COLUMNS", None)
    return env


def marked_processes(marker: str) -> list[int]:
    """Live processes (not zombies) whose environment carries `marker`: the command's and its workers'."""
    found = []
    needle = f"{MARK}={marker}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                if "\nState:\tZ" not in (entry / "status").read_text():
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as in a terminal, even where this script's SIGINT is ignored


def start(args: list[str], marker: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "solbench", *args], env=child_env(marker), cwd=cwd,
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)


def interrupt(proc: subprocess.Popen, signum: int) -> None:
    try:
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
    except ProcessLookupError:
        pass


def finish(proc: subprocess.Popen, outcome: Outcome, marker: str, signum: int, cwd: Path,
           done: tuple[int, ...] = (0,)) -> str:
    """Wait for the command, then check its exit (128 + the signal: 130 for Ctrl-C, 143 for SIGTERM; or one of
    `done` where it had finished first), its output and what it left running; its output."""
    codes = (*done, 128 + signum)
    signalled = time.monotonic()
    try:
        out, err = proc.communicate(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        outcome.problems.append(f"still running {GRACE_S:.0f} s after the signal")
    outcome.ended_s = time.monotonic() - signalled
    # Killed by the signal itself (it came before Python could install a handler): the shell's 128 + N
    outcome.code = 128 - proc.returncode if proc.returncode < 0 else proc.returncode
    text = out + err
    if "Traceback" in text:
        tail = text[text.index("Traceback"):][:600].replace("\n", " / ")
        outcome.problems.append(f"traceback: {tail}")
    if outcome.code not in codes:
        outcome.problems.append(f"exit {outcome.code}, not one of {codes}: {err.strip()[-300:]!r}")
    deadline = time.monotonic() + GRACE_S  # a worker killed at the end may take a while to be reaped when loaded
    while marked_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = marked_processes(marker)
    if left:
        outcome.problems.append(f"processes left running: {left}")
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    for named in NAMED_RE.findall(text + " "):
        if not (cwd / named).exists():  # relative to the command's folder
            outcome.problems.append(f"names {named}, which does not exist")
    if outcome.problems:  # the whole output, for whoever reads the failure
        log = Path(tempfile.gettempdir()) / f"interrupt_check_{marker}.log"
        log.write_text(f"exit {outcome.code}\n--- stdout ---\n{out}\n--- stderr ---\n{err}")
        outcome.problems.append(f"output in {log}")
    return text


def check_traces(path: Path, text: str, outcome: Outcome, kept_count: bool, finished: int | None = None) -> None:
    """Every line parses; as many as the command said it kept; `finished` lines when it exited 0."""
    lines = path.read_text().splitlines() if path.exists() else []
    for number, line in enumerate(lines, 1):
        try:
            json.loads(line)
        except ValueError:
            outcome.problems.append(f"{path.name} line {number} does not parse")
    said = KEPT_RE.search(text)
    if kept_count and said and int(said.group(1)) != len(lines):
        outcome.problems.append(f"said {said.group(1)} kept, {path.name} holds {len(lines)}")
    if finished is not None and outcome.code == 0 and len(lines) != finished:
        outcome.problems.append(f"finished, but {path.name} holds {len(lines)} of {finished} traces")


def check_run(folder: Path, delay_s: float, signum: int, max_workloads: int = 3) -> Outcome:
    """`solbench run` of the layernorm problem on the CPU, interrupted after `delay_s`."""
    outcome = Outcome("run", signal.Signals(signum).name, delay_s)
    marker = uuid.uuid4().hex
    traces = folder / f"{marker}.jsonl"
    proc = start(["run", str(PROBLEM), "--device", "cpu", "--trials", "1", "--max-workloads", str(max_workloads),
                  "-o", str(traces)], marker, folder)
    time.sleep(delay_s)
    interrupt(proc, signum)
    text = finish(proc, outcome, marker, signum, folder)  # 0: it had finished before the signal
    check_traces(traces, text, outcome, kept_count=True, finished=max_workloads)
    return outcome


def check_command(kind: str, folder: Path, delay_s: float, signum: int) -> Outcome:
    """`solbench gate` (the layernorm reference, on the CPU) or `solbench extract` (one model, offline facts),
    interrupted after `delay_s`."""
    outcome = Outcome(kind, signal.Signals(signum).name, delay_s)
    marker = uuid.uuid4().hex
    out = folder / marker
    if kind == "gate":
        args = ["gate", str(reference_solution(folder)), "--problems", str(PROBLEM), "--device", "cpu",
                "--max-workloads", "1", "--verdict", str(out.with_suffix(".json")), "--traces", str(out) + ".jsonl"]
    else:
        args = ["extract", "--model", "Qwen/Qwen3-8B", "-o", str(out)]
    proc = start(args, marker, folder)
    time.sleep(delay_s)
    interrupt(proc, signum)
    text = finish(proc, outcome, marker, signum, folder, (0, 1) if kind == "gate" else (0,))  # gate: 1 = fail
    if kind == "gate":
        check_traces(Path(str(out) + ".jsonl"), text, outcome, kept_count=False)
    return outcome


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen) -> bool:
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.2)
    return False


def check_serve(folder: Path, delay_s: float, signum: int, interrupt_submit: bool) -> Outcome:
    """A `serve` with one `submit` of the reference; the submit is interrupted after `delay_s` (the client goes
    away: the service must log no traceback), or the serve itself is."""
    outcome = Outcome("submit" if interrupt_submit else "serve", signal.Signals(signum).name, delay_s)
    marker, port = uuid.uuid4().hex, free_port()
    serve = start(["serve", "--device", "cpu", "--port", str(port), "--folder", str(folder / marker)], marker, folder)
    try:
        if not wait_for_port(port, serve):
            outcome.problems.append("the service never listened")
            return outcome
        traces = folder / f"{marker}.jsonl"
        submit = start(["submit", str(PROBLEM), "--solution", str(reference_solution(folder)), "--server",
                        f"http://127.0.0.1:{port}", "-o", str(traces)], marker + "s", folder)
        time.sleep(delay_s)
        if interrupt_submit:
            interrupt(submit, signum)
            finish(submit, outcome, marker + "s", signum, folder)
            workloads = len((PROBLEM / "workload.jsonl").read_text().splitlines())  # a submit sends them all
            check_traces(traces, "", outcome, kept_count=False, finished=workloads)
            time.sleep(1.0)  # the service notices the client went away
            interrupt(serve, signal.SIGINT)
            (sub_problems, code, ended_s), outcome.problems = (outcome.problems, outcome.code, outcome.ended_s), []
            finish(serve, outcome, marker, signal.SIGINT, folder, done=())
            outcome.problems = sub_problems + [f"serve: {p}" for p in outcome.problems]
            outcome.code, outcome.ended_s = code, ended_s  # the submit's, which was interrupted
        else:
            interrupt(serve, signum)
            finish(serve, outcome, marker, signum, folder, done=())
            submit.kill()
            submit.communicate()
    finally:
        for proc in (serve,):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
    return outcome


def reference_solution(folder: Path) -> Path:
    """The layernorm reference as a solution file (what `submit` sends)."""
    path = folder / "reference_solution.py"
    if not path.exists():
        source = json.loads((PROBLEM / "definition.json").read_text())["reference"]
        path.write_text(source)
    return path


def main(argv: list[str] | None = None) -> int:
    global GRACE_S  # the checks read it; one setting for the whole script
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--serves", type=int, default=10)
    parser.add_argument("--submits", type=int, default=10)
    parser.add_argument("--gates", type=int, default=5)
    parser.add_argument("--extracts", type=int, default=5)
    parser.add_argument("--max-delay-s", type=float, default=12.0, help="delays are uniform in 0..this")
    parser.add_argument("--grace-s", type=float, default=GRACE_S,
                        help="how long a command may take to end after its signal (a loaded machine is slow)")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    GRACE_S = args.grace_s
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"seed {seed}", flush=True)
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="interrupt_check_") as name:
        folder = Path(name)
        plan = (["run"] * args.runs + ["serve"] * args.serves + ["submit"] * args.submits + ["gate"] * args.gates
                + ["extract"] * args.extracts)
        for kind in plan:
            delay_s, signum = rng.uniform(0.0, args.max_delay_s), rng.choice(SIGNALS)
            if kind == "run":
                outcome = check_run(folder, delay_s, signum)
            elif kind in ("serve", "submit"):
                outcome = check_serve(folder, delay_s, signum, kind == "submit")
            else:
                outcome = check_command(kind, folder, delay_s, signum)
            outcomes.append(outcome)
            print(outcome.line(), flush=True)
    failed = [o for o in outcomes if o.problems]
    print(f"\n{len(outcomes) - len(failed)}/{len(outcomes)} clean (seed {seed})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
