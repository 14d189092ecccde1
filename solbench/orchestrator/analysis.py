"""Speed-of-light analysis off the orchestrator's threads.

Tracing a reference on meta tensors is CPU-bound Python that can take seconds; done inline it
would hold the GIL that the device threads need to keep their GPUs busy. A small process pool
analyses every workload of a problem as soon as the problem starts, and the finished workload
picks up its result.

The pool's processes ignore SIGINT: they share the terminal's process group, so Ctrl-C reaches them
too, and it is the orchestrator's to handle (a pool process that took it would print its own
KeyboardInterrupt traceback). They are told to stop when the run ends, interrupted or not, and end by
themselves when the orchestrator is killed (`lifetime.pool_process_start`).
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import Future, ProcessPoolExecutor

from solbench.orchestrator.lifetime import pool_process_start
from solbench.sol.cache import cached_analyse, cached_only
from solbench.spec.definition import Definition


def _analyse(definition_data: dict, axes: dict, scalars: dict):
    # through the on-disk cache: a problem analysed before (by `solbench sol` or an earlier run) costs nothing
    return cached_analyse(Definition.from_dict(definition_data), axes, scalars=scalars)


class AnalysisPool:
    def __init__(self, workers: int = 1):
        # The initializer's module is light: it runs before the first task imports this module (and torch
        # with it), which is where the seconds of a pool process's start-up go.
        self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=pool_process_start, initargs=(os.getpid(),))

    def submit(self, definition: Definition, axes: dict, scalars: dict) -> Future:
        """The workload's analysis: read here when the on-disk cache has it (a run of problems analysed
        before then starts no pool process, whose torch import would compete with the workers' start-up),
        else computed in the pool."""
        cost = cached_only(definition, dict(axes), scalars=dict(scalars))
        if cost is not None:
            done: Future = Future()
            done.set_result(cost)
            return done
        return self._pool.submit(_analyse, definition.to_dict(), dict(axes), dict(scalars))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
