"""The reference's results reused across the candidates of a problem, for the service's lifetime and after.

Every candidate of a problem is timed against the same baselines (the problem's shipped optimised baseline,
torch.compile of the reference), measured in the trusted reference worker. A one-off run measures them again
for every candidate; the service measures each once per (definition hash, workload, GPU, clocks, torch
version, timing settings) and reuses it. The file lives in the service's own folder, which no worker can
write (each worker writes only its scratch folder: worker/sandbox.py), and a trace that got a reused time
says so in its warnings.

The eager reference's timed samples are kept too (with the facts its blocks reported about their inputs), and
the candidates after the first are timed alone: on an H200 this took an agent's verdict from 15.3 s (one
`solbench run` each) to 2.9 s. The price is the drift protection of interleaved blocks (docs/timing.md): a
service started with `--no-reuse-eager-reference` times the eager reference with every candidate. Never reused:
the reference's outputs, which never leave the reference worker.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

from solbench.spec.errors import SpecError
from solbench.spec.problem import Problem, baseline_solution
from solbench.spec.trace import Environment


def definition_hash(problem: Problem) -> str:
    """What the reference computes: the definition (with its reference code), not its folder."""
    payload = json.dumps(problem.definition.to_dict(), sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


class ReferenceTimings:
    """Baseline medians (ms), and the eager reference's timed samples where reused (a dict: `orchestrator.timed`),
    by key, kept in memory and appended to `path`, one JSON line per entry (the last for a key wins): a new entry
    costs one line however many are kept, and a line cut short by a crash loses only its own entry."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self.hits = 0
        self._times: dict[str, float | dict] = {}
        try:
            lines = self.path.read_text().splitlines()
        except OSError:
            lines = []
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # cut short: measured again
            if isinstance(entry, dict) and isinstance(entry.get("key"), str) and "value" in entry:
                self._times[entry["key"]] = entry["value"]

    @staticmethod
    def key(problem: Problem, workload_uuid: str, kind: str, environment: Environment | None, device: str,
            clocks_locked: bool, settings: str) -> str:
        """The facts a baseline time depends on, hashed; `kind` is "shipped", "compile" or "eager", `settings`
        the timing settings and input sets the block ran with."""
        baseline = ""
        if kind == "shipped":
            try:
                solution = baseline_solution(problem)
            except SpecError:  # unusable: measuring it says why, and nothing is stored
                solution = None
            baseline = solution.content_hash() if solution is not None else ""
        machine = [getattr(environment, name, None) for name in ("hardware", "torch", "cuda")]
        facts = [definition_hash(problem), workload_uuid, kind, baseline, device, *machine, clocks_locked, settings]
        return hashlib.sha256(json.dumps(facts, default=str).encode()).hexdigest()

    def get(self, key: str) -> float | dict | None:
        with self._lock:
            found = self._times.get(key)
            if found is not None:
                self.hits += 1
            return found

    def put(self, key: str, value: float | dict) -> None:
        with self._lock:
            self._times[key] = value
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as lines:
                lines.write(json.dumps({"key": key, "value": value}) + "\n")
