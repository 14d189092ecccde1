"""Speed-of-light analysis off the orchestrator's threads.

Tracing a reference on meta tensors is CPU-bound Python that can take seconds; done inline it
would hold the GIL that the device threads need to keep their GPUs busy. A small process pool
analyses every workload of a problem as soon as the problem starts, and the finished workload
picks up its result.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import Future, ProcessPoolExecutor

from solbench.sol.analyser import analyse
from solbench.spec.definition import Definition


def _analyse(definition_data: dict, axes: dict, scalars: dict):
    return analyse(Definition.from_dict(definition_data), axes, scalars=scalars)


class AnalysisPool:
    def __init__(self, workers: int = 1):
        self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))

    def submit(self, definition: Definition, axes: dict, scalars: dict) -> Future:
        return self._pool.submit(_analyse, definition.to_dict(), dict(axes), dict(scalars))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
