"""Speed-of-light analysis off the orchestrator's threads.

Tracing a reference on meta tensors is CPU-bound Python that can take seconds; done inline it
would hold the GIL that the device threads need to keep their GPUs busy. A small process pool
analyses the workloads, and each finished workload picks up its result.

A run hands the pool every workload it will evaluate as soon as its jobs exist (`submit_ahead`), in
the order the devices will take them: what the on-disk cache lacks is sent to the pool at once, before
this process imports torch, so the pool's start-up (its own torch import) and the first analyses overlap
the workers' start-up instead of delaying each device's first workload (4-6 s on a 4-GPU host with an
empty cache, benchmarks/cluster_throughput.py). A workload asked for again gets the same future.

The pool's processes ignore SIGINT: they share the terminal's process group, so Ctrl-C reaches them
too, and it is the orchestrator's to handle (a pool process that took it would print its own
KeyboardInterrupt traceback). They are told to stop when the run ends, interrupted or not, and end by
themselves when the orchestrator is killed (`lifetime.pool_process_start`).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ProcessPoolExecutor

from solbench.orchestrator.lifetime import pool_process_start, sigint_blocked
from solbench.sol.cache import entry_file, entry_key, read_entry
from solbench.spec.definition import Definition
from solbench.spec.workload import Workload


def _analyse(definition_data: dict, axes: dict, scalars: dict):
    # through the on-disk cache: a problem analysed before (by `solbench sol` or an earlier run) costs nothing
    from solbench.sol.cache import cached_analyse  # inner: this module stays light for the pool's start-up

    return cached_analyse(Definition.from_dict(definition_data), axes, scalars=scalars)


def _import_analyser() -> None:
    import solbench.sol.analyser  # noqa: F401 - the pool process's torch import, done ahead of its first task


def pool_size(devices: int) -> int:
    """Analysis processes for a run on `devices` devices: one per device where the host has the cores
    (8 per process), so four GPUs starting four problems at once are not served one analysis at a time;
    at least one."""
    return max(1, min(devices, (os.cpu_count() or 1) // 8))


class AnalysisPool:
    def __init__(self, workers: int = 1):
        # The initializer's module is light: it runs before the first task imports the analyser (and torch
        # with it), which is where the seconds of a pool process's start-up go.
        self._pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=pool_process_start, initargs=(os.getpid(),))
        self._futures: dict[str, Future] = {}
        self._lock = threading.Lock()

    def submit(self, definition: Definition, axes: dict, scalars: dict) -> Future:
        """The workload's analysis: read here when the on-disk cache has it (a run of problems analysed
        before then starts no pool process, whose torch import would compete with the workers' start-up),
        else computed in the pool. The same workload asked for twice gets the same future."""
        return self._future(definition, dict(axes), dict(scalars), read_cached=True)

    def submit_ahead(self, work: Iterable[tuple[Definition, Workload]]) -> None:
        """Queue the analyses of these workloads (in this order) that the cache lacks, without reading the
        ones it has: nothing here imports torch. `submit` later returns the same futures."""
        for definition, workload in work:
            self._future(definition, dict(workload.axes), dict(workload.scalar_values()), read_cached=False)

    def _future(self, definition: Definition, axes: dict, scalars: dict, *, read_cached: bool) -> Future | None:
        key = entry_key(definition, axes, "strict", scalars)
        with self._lock:
            future = self._futures.get(key)
            if future is not None:
                return future
            path = entry_file(key)
            if path is not None and path.exists():
                if not read_cached:
                    return None  # read when the workload asks for it (`submit`): reading imports torch
                cost = read_entry(path)
                if cost is not None:
                    future = Future()
                    future.set_result(cost)
            if future is None:  # not cached, or an entry that did not read: the pool computes (and rewrites) it
                with sigint_blocked():  # a submit may start the pool's process
                    future = self._pool.submit(_analyse, definition.to_dict(), axes, scalars)
            self._futures[key] = future
            return future

    def broken(self) -> bool:
        """Whether a pool process died (the pool then refuses all later work)."""
        return bool(getattr(self._pool, "_broken", False))

    def warm(self) -> None:
        """Start the pool's process and its torch import now, where the analyses to come are not known yet
        (a cluster actor gets its problems one at a time): on a host with cores to spare, so that the first
        problem's analysis does not wait for it."""
        if (os.cpu_count() or 1) >= 8:
            with sigint_blocked():
                self._pool.submit(_import_analyser)

    def close(self) -> None:
        """Drop what is still queued and end the processes now: an analysis in progress is of no use once the
        run is over (its cache entry is written whole or not at all), and a process left to finish it would
        outlive the command (`cli.console_main` skips the interpreter's joins at exit)."""
        processes = list((self._pool._processes or {}).values())  # before shutdown forgets them
        self._pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            if process.is_alive():
                process.terminate()
