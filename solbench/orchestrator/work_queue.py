"""The cluster's queue of work: problem by problem, longest first, and what happens when an actor dies.

Every actor takes the next item when it finishes one, so all GPUs stay busy and the long problems do not
start last. An item is a job with the workloads it still owes. When the actor running it dies, the
workloads it did not report go back to the queue; the one in flight gets a strike, and a workload with
`MAX_STRIKES` strikes (it killed that many actors) is handed back as a failure instead of running again.
A free actor waits while other items are in flight, since a death may put work back.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from solbench.orchestrator.jobs import Job
from solbench.orchestrator.sizes import declared_set_bytes
from solbench.spec.workload import Workload

MAX_STRIKES = 2
# A workload costs a fixed part (loading, trials, timing blocks) and a part that grows with its tensors.
FIXED_COST_BYTES = 256 << 20


@dataclass
class WorkItem:
    job: Job
    workloads: tuple[Workload, ...]  # still owed: not in the trace file, not reported yet
    strikes: dict[str, int] = field(default_factory=dict)  # workload uuid -> actors that died running it

    @property
    def cost(self) -> int:
        """A relative estimate of the item's run time (its workloads' tensor bytes plus a fixed part each)."""
        return sum(FIXED_COST_BYTES + declared_set_bytes(self.job.problem, w, "inputs")
                   + declared_set_bytes(self.job.problem, w, "outputs") for w in self.workloads)


class WorkQueue:
    """Thread-safe: `take` the next item, `finish` it, or `give_back` what a dead actor left."""

    def __init__(self, items: list[WorkItem]):
        self._items = sorted((i for i in items if i.workloads), key=lambda i: i.cost, reverse=True)
        self._in_flight = 0
        self._closed = False
        self._cond = threading.Condition()

    def take(self, timeout_s: float = 0.5) -> WorkItem | None:
        """The next item; None when there is nothing left (or the queue was closed). Blocks while the
        queue is empty but other items are in flight, rechecking every `timeout_s`."""
        with self._cond:
            while True:
                if self._closed:
                    return None
                if self._items:
                    self._in_flight += 1
                    return self._items.pop(0)
                if self._in_flight == 0:
                    return None
                self._cond.wait(timeout_s)

    def finish(self) -> None:
        with self._cond:
            self._in_flight -= 1
            self._cond.notify_all()

    def give_back(self, item: WorkItem, reported: set[str]) -> list[Workload]:
        """An actor died running `item` after reporting the workloads in `reported`. The rest go back to
        the front of the queue; returns the workloads that have now killed MAX_STRIKES actors (the caller
        records them as failures; they are not queued again)."""
        owed = [w for w in item.workloads if w.uuid not in reported]
        failed: list[Workload] = []
        if owed:
            strikes = dict(item.strikes)
            strikes[owed[0].uuid] = strikes.get(owed[0].uuid, 0) + 1  # the one in flight when it died
            if strikes[owed[0].uuid] >= MAX_STRIKES:
                failed.append(owed.pop(0))
            item = WorkItem(item.job, tuple(owed), strikes)
        with self._cond:
            if item.workloads and owed:
                self._items.insert(0, item)
            self._in_flight -= 1
            self._cond.notify_all()
        return failed

    def close(self) -> None:
        """No more items for anyone (the run is stopping)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def idle(self) -> bool:
        """Nothing queued and nothing in flight: the run's work is done (or the queue was closed)."""
        with self._cond:
            return self._closed or (not self._items and self._in_flight == 0)

    def remaining(self) -> int:
        """Workloads still queued (not counting items in flight)."""
        with self._cond:
            return sum(len(i.workloads) for i in self._items)
