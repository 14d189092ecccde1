"""The reference's results reused across the candidates of a problem, for the service's lifetime and after.

Every candidate of a problem is timed against the same baselines (the problem's shipped optimised baseline,
torch.compile of the reference), measured in the trusted reference worker. A one-off run measures them again
for every candidate; the service measures each once per content key (`orchestrator.reuse_key`: the
definition's and the workload's content with its blobs, the baseline's content, the GPU model, clocks,
versions, settings) and reuses it: a same-uuid problem of other content gets a key of its own. Only the
orchestrator computes keys and writes entries, from its own requests' replies; the file lives in the
service's own folder, which no worker can write (each worker writes only its scratch folder:
worker/sandbox.py), and a trace that got a reused time says so in its warnings.

The eager reference's timed samples are kept too (with the facts its blocks reported about their inputs), and
the candidates after the first are timed alone: on an H200 this took an agent's verdict from 15.3 s (one
`solbench run` each) to 2.9 s. The price is the drift protection of interleaved blocks (docs/timing.md): a
service started with `--no-reuse-eager-reference` times the eager reference with every candidate. Never reused:
the reference's outputs, which never leave the reference worker.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path


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
