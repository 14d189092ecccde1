"""Python loops in a reference that are bound to blow the trace budget: stopped after a few turns.

A reference that steps through time (`for t in range(seq_len)`, an RNN or a recurrence) runs tens of
thousands of aten ops on meta tensors; the trace budget (`meta_tracer.MAX_OPS`) then stops it and the
analyser falls back to the declared I/O. Running into the budget gives the right answer but costs
the whole budget (a minute on a loaded machine) per workload.

So the reference's `range` is watched: `compile_reference` puts `watched_range` in its namespace,
and each turn of a loop over it notes the trace's op count. After `SAMPLE_TURNS` turns the cheapest
turn seen so far predicts the rest: when `ops so far + turns left x cheapest turn` exceeds
`MARGIN` times the budget, the trace stops at once with the same `BudgetExceeded` the budget would
raise. Only a loop whose remaining turns are all cheaper than the cheapest of its first ones could
have fit; the prediction depends only on op counts, so the outcome is as deterministic as the
budget itself.
"""

from __future__ import annotations

import builtins
from contextlib import contextmanager

from solbench.sol.capture_data import BudgetExceeded

SAMPLE_TURNS = 3  # turns measured before predicting
MARGIN = 1.0  # stop when the prediction (at the cheapest turn seen) exceeds the budget this many times
_active: list = []  # the tracers of the captures running now (innermost last)


@contextmanager
def watching(tracer):
    """Loops over `watched_range` inside are measured against `tracer`'s op budget."""
    _active.append(tracer)
    try:
        yield
    finally:
        _active.remove(tracer)


class _WatchedRange:
    """A range that measures the ops each turn of a loop over it costs (otherwise a plain range)."""

    def __init__(self, r: range, tracer):
        self._range, self._tracer = r, tracer

    def __iter__(self):
        tracer, total = self._tracer, len(self._range)
        cheapest, last = None, tracer.n_ops
        for turn, value in enumerate(self._range):
            if turn:
                cost = tracer.n_ops - last
                cheapest = cost if cheapest is None else min(cheapest, cost)
                last = tracer.n_ops
                if turn >= SAMPLE_TURNS and tracer.n_ops + (total - turn) * cheapest > MARGIN * tracer.max_ops:
                    raise BudgetExceeded(
                        f"the reference loops over range({total}) at {cheapest} or more ops per turn: "
                        f"about {tracer.n_ops + (total - turn) * cheapest} ops on meta tensors, over the "
                        f"budget of {tracer.max_ops} (stopped after {turn} turns)")
            yield value

    def __len__(self) -> int:
        return len(self._range)

    def __getitem__(self, item):
        return self._range[item]

    def __contains__(self, item) -> bool:
        return item in self._range

    def __reversed__(self):
        return reversed(self._range)

    def __getattr__(self, name):
        return getattr(self._range, name)


def watched_range(*args):
    """`range`, watched while a capture runs (a plain range otherwise or when short)."""
    r = builtins.range(*args)
    if not _active or len(r) <= SAMPLE_TURNS:
        return r
    return _WatchedRange(r, _active[-1])
