"""Regression cases for reused reference facts (issue 47, finding 1), run through one `solbench serve`.

A service reuses the reference's timings across candidates. These cases are submissions, not single solution
files: a hostile one sends a problem by content with the definition name and workload uuid of the real
problem but other content, so that a reference time measured on it would, under a key without the content,
be read back for the real problem's candidates. The legit one sends the real problem's content again from
another folder, which must share its record. Every poisoning submission runs first, then the honest
candidate, whose reference time must be its own measurement (speedup near 1: it does the reference's work).
Used by tests/anticheat/test_reuse_cases.py (CPU, and the GPU variant there).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tests.runner.conftest import write_problem

REUSED = "eager reference time reused"
UUID = "w0"  # every problem of a scenario names its one workload so


@dataclass(frozen=True)
class Scenario:
    """A device's problem sizes and codes. `reference` takes `{repeat}`: how many times it does the work (1 for
    the real problem). On the CPU the work is busy time per element, so that
    time follows the batch and every call lands in the same slot band (`orchestrator.timed.SLOTS_BY_CALL_S`)."""

    device: str
    honest_n: int
    poison_n: int
    reference: str
    honest: str
    attacker: str

    def reference_doing(self, repeat: int) -> str:
        return self.reference.replace("{repeat}", str(repeat))


CPU_SLEEP_S = 1.2 * 10e-3  # past the longest slot band's floor however loaded the machine is
# Busy work, not a sleep: CPU runs time the worker's CPU time (docs/timing.md, "CPU timings"), where a sleep
# costs nothing. `_busy` spins for a while of the process's CPU time.
_BUSY = ("import time\n\n\ndef _busy(seconds):\n    end = time.process_time() + seconds\n"
         "    while time.process_time() < end:\n        pass\n")
CPU = Scenario(
    "cpu", 64, 640,
    reference=f"{_BUSY}\nimport torch\n\ndef run(x, y):\n    _busy({{repeat}} * {CPU_SLEEP_S / 64!r} * "
              f"x.shape[0])\n    return x * 2.0 + y\n",
    honest=f"# solbench: problem=axpy_fp32\n{_BUSY}\n\ndef run(x, y):\n    _busy({CPU_SLEEP_S / 64!r} * "
           f"x.shape[0])\n    return x * 2.0 + y\n",
    attacker=f"# solbench: problem=axpy_fp32\n{_BUSY}\n\ndef run(x, y):\n    _busy({CPU_SLEEP_S!r})\n"
             f"    return y + 2.0 * x\n")
GPU = Scenario(
    "cuda", 1 << 20, 1 << 24,
    reference="import torch\n\ndef run(x, y):\n    for _ in range({repeat}):\n        out = x * 2.0 + y\n    return out\n",
    honest="# solbench: problem=axpy_fp32\nimport torch\n\ndef run(x, y):\n    return x * 2.0 + y\n",
    attacker="# solbench: problem=axpy_fp32\nimport torch\n\ndef run(x, y):\n    return y + 2.0 * x\n")


@dataclass(frozen=True)
class ReuseCase:
    kind: str  # "hostile" or "legit"
    name: str
    what: str

    @property
    def id(self) -> str:
        return f"{self.kind}/{self.name}"


CASES = (
    ReuseCase("hostile", "reuse_same_uuid_larger_batch",
              "the real problem's definition and uuid, a batch 10x larger: its reference time is 10x"),
    ReuseCase("hostile", "reuse_reference_process_patched",
              "a problem whose reference patches torch's addition in its process, for the next problem's reference"),
    ReuseCase("legit", "reuse_same_content_other_folder",
              "the real problem's own content from another folder: the record is shared"),
)


# Loaded into the reference worker, this leaves every later `+` of the process off by one: had the next problem's
# reference run in the same process, its outputs (which judge candidates) would be wrong, and the honest fail.
PATCHING = ("import torch\n\n_add = torch.Tensor.__add__\ntorch.Tensor.__add__ = lambda a, b: _add(_add(a, b), 1.0)\n\n"
            "def run(x, y):\n    return x * 2.0 + y\n")


def problem(root: Path, n: int, reference: str) -> Path:
    """The axpy problem with its one workload named UUID whatever its size."""
    folder = write_problem(root, sizes=(n,), reference=reference)
    line = {"uuid": UUID, "axes": {"n": n}, "inputs": {"x": {"type": "random"}, "y": {"type": "random"}},
            "tolerance": {"max_atol": 1e-5, "max_rtol": 1e-5}}
    (folder / "workload.jsonl").write_text(json.dumps(line) + "\n")
    return folder


def reused(trace) -> bool:
    return any(REUSED in w for w in trace.evaluation.warnings)


def run_cases(client, root: Path, scenario: Scenario, options: dict) -> dict[str, tuple[bool, str]]:
    """Each case's (held, what was seen), every poisoning first; `client` talks to a fresh service."""
    real = scenario.reference_doing(1)
    poisons = {"reuse_same_uuid_larger_batch": problem(root / "batch", scenario.poison_n, real)}
    poisoned = {name: client.evaluate(folder, source=scenario.attacker, **options)[0] for name, folder in poisons.items()}
    client.evaluate(problem(root / "patched", scenario.honest_n, PATCHING), source=scenario.attacker, **options)
    honest = client.evaluate(problem(root / "honest", scenario.honest_n, real),
                             source=scenario.honest, **options)[0]
    again = client.evaluate(problem(root / "again", scenario.honest_n, real),
                            source=scenario.honest.replace("x * 2.0 + y", "2.0 * x + y"), **options)[0]
    performance = honest.evaluation.performance
    honest_ms = performance.reference_latency_ms if performance is not None else None
    seen = f"honest {honest.status.value} speedup {getattr(performance, 'speedup_factor', None)} reused {reused(honest)}"
    true_speedup = (honest.status.value == "PASSED" and not reused(honest) and performance is not None
                    and performance.speedup_factor is not None and 1 / 3 < performance.speedup_factor < 3)
    out = {}
    for name, trace in poisoned.items():
        poison_ms = trace.evaluation.performance.reference_latency_ms if trace.evaluation.performance else None
        held = (trace.status.value == "PASSED" and true_speedup and poison_ms is not None
                and honest_ms < poison_ms / 3)
        out[f"hostile/{name}"] = (held, f"{seen}; poison reference {poison_ms} ms vs {honest_ms}")
    out["hostile/reuse_reference_process_patched"] = (honest.status.value == "PASSED", seen)
    out["legit/reuse_same_content_other_folder"] = (
        again.status.value == "PASSED" and reused(again) and honest_ms is not None
        and again.evaluation.performance.reference_latency_ms == honest_ms,
        f"again {again.status.value} reused {reused(again)}")
    return out
