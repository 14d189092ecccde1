"""One model's blocks on several processes: a block's export and CPU validation run in a forked worker ahead
of its turn, and its result is taken at its turn, in the blocks' order, so what is written is what one
process writes.

A model alone used one core: `--jobs` spread models, never one model's blocks, and a diffusion model's
hundred blocks ran one after the other. Workers are forked from the process that built the model (the meta
model, its recorded calls and torch are already there); each runs on one intra-op thread, as the workers
share the cores. A worker holds one block's CPU copies at a time (about 7 GB for a block of 1 G parameters),
so the count is bounded by the memory available for the model's largest block too (`wanted`).

Only work whose result depends on nothing but itself is sent ahead (`blocks._sent_ahead` settles first
what a model's blocks share; `Validator._spread` draws the weights first). A worker that dies (out of
memory, a signal) or fails leaves its item to the caller, which runs it as one process would.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import signal
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

BYTES_PER_PARAMETER = 7  # a block's float32 and bfloat16 copies (6 bytes a parameter) and what its runs add
BYTES_PER_WORKER = 1 << 30  # besides its blocks' copies: a forked process's own pages, inputs and outputs
_PROCESSES = 1  # set by `processes()`: how many workers a model's blocks may use


@contextlib.contextmanager
def processes(count: int) -> Iterator[None]:
    """Within this, `extract_blocks` spreads a model's blocks over up to `count` worker processes."""
    global _PROCESSES
    saved, _PROCESSES = _PROCESSES, max(1, count)
    try:
        yield
    finally:
        _PROCESSES = saved


def asked() -> int:
    """The workers `processes()` asked for (1 outside it): check it before sizing a model for `wanted`."""
    return _PROCESSES


def wanted(largest_block_params: int) -> int:
    """The workers asked for, bounded by the memory available for each to hold the largest block's copies."""
    return usable(_PROCESSES, BYTES_PER_WORKER + BYTES_PER_PARAMETER * largest_block_params)


def usable(count: int, worker_bytes: int, available_bytes: int | None = None) -> int:
    """`count`, or fewer where the memory available would not hold that many workers of `worker_bytes` (at
    least 1)."""
    if count <= 1:
        return 1
    available = _available_bytes() if available_bytes is None else available_bytes
    if available is None:
        return count
    return max(1, min(count, available // max(1, worker_bytes)))


def _available_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class Ahead:
    """`work(index)` for each of `indices`, in forked workers, taken back one by one with `take`.

    `work` runs in a worker and returns something picklable; an exception there, or the worker's death, makes
    `take` return None for that index, and the caller does the work itself."""

    def __init__(self, work: Callable[[int], Any], indices: Sequence[int], count: int, one_each: bool = False):
        self.results: dict[int, Any] = {}
        self.lost: set[int] = set()  # failed or died: the caller's to run
        self.pending = set(indices)
        self.running: dict[Connection, tuple[Any, set[int]]] = {}  # conn -> (process, indices started there)
        if count < 2 or not indices:
            self.lost |= self.pending
            self.pending.clear()
            return
        context = multiprocessing.get_context("fork")
        tasks = context.SimpleQueue()
        for index in indices:
            tasks.put(index)
        for _ in range(min(count, len(indices))):
            tasks.put(None)  # one stop per worker
        for _ in range(min(count, len(indices))):
            receive, send = context.Pipe(duplex=False)
            process = context.Process(target=_worker, args=(work, tasks, send, os.getpid(), one_each), daemon=True)
            process.start()
            send.close()
            self.running[receive] = (process, set())

    def take(self, index: int) -> Any | None:
        """The result of `work(index)`, waiting for it; None where it was not sent ahead or was lost."""
        while index in self.pending and self.running:
            for conn in wait(list(self.running)):
                self._receive(conn)
        if index in self.pending:  # every worker has ended without it
            self.pending.discard(index)
            self.lost.add(index)
        return self.results.pop(index, None)

    def _receive(self, conn: Connection) -> None:
        process, started = self.running[conn]
        try:
            kind, index, payload = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):  # the worker ended: what it had started is lost
            del self.running[conn]
            conn.close()
            process.join()
            self.pending -= started
            self.lost |= started
            return
        if kind == "start":
            started.add(index)
            return
        started.discard(index)
        self.pending.discard(index)
        if kind == "done":
            self.results[index] = payload
        else:
            self.lost.add(index)

    def close(self) -> None:
        """Stop the workers (those still running blocks nobody will take: an exception in the caller)."""
        for conn, (process, _) in list(self.running.items()):
            if process.is_alive():
                process.kill()
            process.join()
            conn.close()
        self.running.clear()


@contextlib.contextmanager
def ahead(work: Callable[[int], Any], indices: Sequence[int], count: int, one_each: bool = False) -> Iterator[Ahead]:
    """An `Ahead` closed on leaving; `one_each`: each worker does one item and ends (give as many workers as
    items), so that no item starts from the state another item left."""
    pool = Ahead(work, indices, count, one_each)
    try:
        yield pool
    finally:
        pool.close()


def each(work: Callable[[int], Any], count: int) -> list:
    """`[work(i) for i in range(count)]`, with item 0 in this process and each other item in a worker of its
    own at the same time where `processes()` asked for more than one (a model's recordings at its three
    capture sizes: a few items). The workers are forked before item 0 runs here, so every item starts from
    the state the caller had; an item a worker failed or lost is run here afterwards. `work` never returns
    None."""
    if _PROCESSES < 2 or count < 2:
        return [work(i) for i in range(count)]
    with ahead(work, list(range(1, count)), count - 1, one_each=True) as pool:
        first = work(0)
        rest = [pool.take(i) for i in range(1, count)]
    return [first] + [result if result is not None else work(i) for i, result in enumerate(rest, 1)]


def _worker(work: Callable[[int], Any], tasks, conn: Connection, parent: int, one_each: bool = False) -> None:
    """Take block indices until told to stop; each result, or why it failed, goes back as soon as it is known.
    The caller stops its workers itself (Ctrl-C reaches it, `close`); a worker whose caller is gone dies too."""
    import torch

    from solbench.worker.sandbox import die_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(parent)
    # The caller's console thread may have held the stream objects' locks when it forked: new ones, same fds.
    sys.stdout, sys.stderr = (os.fdopen(os.dup(fd), "w", buffering=1) for fd in (1, 2))
    torch.set_num_threads(1)  # the workers share the cores, and after a fork OpenMP hangs in a two-thread region
    try:
        while (index := tasks.get()) is not None:
            conn.send_bytes(pickle.dumps(("start", index, None)))
            try:
                payload = pickle.dumps(("done", index, work(index)))
            except Exception:  # noqa: BLE001 - the caller runs this block itself and meets the error there
                payload = pickle.dumps(("failed", index, traceback.format_exc(limit=3)))
            conn.send_bytes(payload)
            if one_each:
                break
        conn.close()
    except BaseException:  # noqa: BLE001 - the caller closed the pipe or is gone: there is no one to tell
        os._exit(1)
    os._exit(0)  # no atexit handlers or finalizers of the parent's objects in a forked copy
