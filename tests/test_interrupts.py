"""Ctrl-C or SIGTERM at random moments of `solbench run`, and SIGTERM to a gate: a clean end every time (issue 48).

A few of `benchmarks/interrupt_check.py`'s checks, at random delays from start-up (imports, workers starting)
to the timed blocks: no traceback, exit 130 or 143 (0 when it had finished), no process left running, every
trace line parses, as many as the command said it kept, and every file it names exists. The benchmark runs
50 of them, and `serve` and `submit`.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
import uuid

from tests.scripts import benchmark_script

INTERRUPTS = 8
MAX_DELAY_S = 6.0


def test_run_ends_cleanly_whenever_it_is_interrupted(tmp_path):
    seed = int(os.environ.get("SOLBENCH_INTERRUPT_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    with benchmark_script("interrupt_check.py") as check:
        outcomes = []
        for _ in range(INTERRUPTS):
            signum = rng.choice((signal.SIGINT, signal.SIGTERM))
            outcomes.append(check.check_run(tmp_path, rng.uniform(0.0, MAX_DELAY_S), signum, max_workloads=1))
    failed = [o.line() for o in outcomes if o.problems]
    assert not failed, f"seed {seed} (SOLBENCH_INTERRUPT_SEED):\n" + "\n".join(failed)
    assert {o.code for o in outcomes} <= {0, 130, 143}


SLOW_LAYERNORM = """# solbench: problem=layernorm_fp32_h1024
import time

import torch.nn.functional as F


def run(x, weight, bias, y):
    time.sleep(5)  # the gate is still evaluating when its SIGTERM comes
    y.copy_(F.layer_norm(x, (x.shape[-1],), weight, bias, 1e-5))
"""


def test_a_sigterm_stops_the_gate_and_its_run(tmp_path):
    """SIGTERM to the gate's process alone (a CI runner cancelling a job): passed on to the isolated run, which
    stops and keeps what finished; the gate writes a fail verdict that says why and exits 143."""
    solution = tmp_path / "slow.py"
    solution.write_text(SLOW_LAYERNORM)
    verdict, traces = tmp_path / "verdict.json", tmp_path / "traces.jsonl"
    with benchmark_script("interrupt_check.py") as check:
        outcome = check.Outcome("gate", "SIGTERM", 0.0)
        marker = uuid.uuid4().hex
        proc = check.start(["gate", str(solution), "--problems", str(check.PROBLEM), "--device", "cpu",
                            "--max-workloads", "1", "--quick", "--verdict", str(verdict), "--traces", str(traces)],
                           marker, tmp_path)
        deadline = time.monotonic() + 300  # start-up on a loaded machine: generous, not a timing assert
        while len(check.marked_processes(marker)) < 3 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)  # the gate, its isolated run, and a worker of that run
        assert proc.poll() is None, proc.communicate()
        check.interrupt(proc, signal.SIGTERM)
        text = check.finish(proc, outcome, marker, signal.SIGTERM, tmp_path, done=())
    assert not outcome.problems, outcome.line()
    decided = json.loads(verdict.read_text())
    assert decided["verdict"] == "fail" and decided["reasons"][0] == "interrupted", decided
    assert "PASSED" not in decided["counts"], decided  # the run stopped: its slow workload never finished
    assert any(line.startswith("solbench gate: FAIL") and f"verdict in {verdict}" in line
               for line in text.splitlines()), text[-2000:]


def test_an_interrupt_python_cannot_raise_is_not_printed(monkeypatch):
    """Ctrl-C handled inside a weakref callback (importlib's module-lock clean-up, met by the benchmark at 0.9 s
    into a run) reaches `sys.unraisablehook`, whose default prints "Exception ignored in" and a traceback. After
    a signal, solbench's hook keeps quiet (the stop is carried by `stop_requested`); anything else still goes
    to the hook before it."""
    import sys
    import weakref

    from solbench import cli

    class Held:
        pass

    def raise_in_callback(_ref) -> None:
        raise KeyboardInterrupt("SIGINT")

    seen = []
    monkeypatch.setattr(sys, "unraisablehook", cli._unraisable(seen.append))
    for received in ([signal.SIGINT], []):
        monkeypatch.setattr(cli, "_received", received)
        held = Held()
        ref = weakref.ref(held, raise_in_callback)
        del held  # the callback runs now and raises where nothing can catch it
        assert ref() is None
    assert [type(u.exc_value) for u in seen] == [KeyboardInterrupt]  # only the one raised without a signal


def test_a_signal_during_an_import_waits_for_the_import_to_finish(tmp_path, monkeypatch):
    """A SIGTERM that comes while a module's top level runs (beneath C++ in torch's imports, where raising
    aborts the process) is held until the import has finished, then stops the command: the module is whole,
    the exit is 143."""
    import sys

    from solbench import cli

    (tmp_path / "signalled_module.py").write_text(
        "import os, signal\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "lines = [n for n in range(200000)]  # Python runs its signal handlers here, mid-import\n"
        "whole = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reached = []

    def command(_argv):
        import signalled_module

        reached.append(signalled_module.whole)
        time.sleep(30)  # the held signal is sent again and ends this
        reached.append("slept")
        return 0

    monkeypatch.setattr(cli, "_main", command)
    monkeypatch.delitem(sys.modules, "signalled_module", raising=False)
    assert cli.main([]) == cli.EXIT_TERMINATED
    assert reached == [True]
