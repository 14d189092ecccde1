"""Extract several models at once in `--jobs` kept worker processes, results handed back in model order.

Each model's extraction is independent (its own build, capture and seeded validation), so models can run
side by side; what is written stays byte-identical because the results are merged in the order the models
were asked for, never in the order they finish. Models with the same architecture facts, and diffusers
models with the same VAE, form one unit (`reuse.shipped_group`), run in their order in one process inside
one `reuse.session()`, so the later ones reuse the first's result or its blocks. Workers are forked from
the caller (torch already imported) and kept across units: a process forked per unit imported again what
the models import lazily (transformers' and diffusers' modeling code, `torch.export`'s machinery), 2-3 s
of a small model's 3 s. A worker that dies (out of memory, a signal) is reported for its unit's models
not yet done and replaced; the others go on.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from solbench.extract import block_pool, reuse

MODEL_PROCESS_BYTES = 8 << 30  # what one model's process may hold at once by default (SAM-HQ alone: 6.6 GB)


def default_jobs(models: int) -> int:
    """`--jobs` when it is not given: the cores this process may run on. For several models also no more
    processes than the memory available holds at MODEL_PROCESS_BYTES each; one model's block workers are
    bounded by its largest block instead (`block_pool.wanted`). The files are the same for any count."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cores if models <= 1 else block_pool.usable(cores, MODEL_PROCESS_BYTES)


@dataclass
class Outcome:
    """One model's result, or the one-line error that stopped it, with its own wall and CPU seconds."""

    model_id: str
    result: Any = None
    error: str = ""  # "" when `result` is set
    bad_input: bool = False  # the error is the model's input (a SpecError)
    wall_s: float = 0.0
    cpu_s: float = 0.0


def run_each(model_ids: Sequence[str], work: Callable[[str], Any], jobs: int = 1,
             on_done: Callable[[int, Outcome], None] | None = None, timeout_s: float | None = None,
             group: Callable[[str], str] | None = None,
             slow: Callable[[str], bool] | None = None) -> list[Outcome]:
    """`work(model_id)` for every model, `jobs` processes at a time (1: here, in order), inside one
    `reuse.session()` per process. `group(model_id)`: models with the same value share a process;
    `slow(model_id)`: a unit holding such a model starts before the others (`units`).
    `on_done(index, outcome)` hears each model as it finishes; the list is in `model_ids` order."""
    done = on_done or (lambda index, outcome: None)
    if jobs <= 1 or len(model_ids) <= 1:
        outcomes = []
        with reuse.session():
            for index, model_id in enumerate(model_ids):
                outcome = _run_here(model_id, work)
                done(index, outcome)
                outcomes.append(outcome)
        return outcomes
    return _run_forked(list(model_ids), units(model_ids, group, slow), work, jobs, done, timeout_s)


def units(model_ids: Sequence[str], group: Callable[[str], str] | None,
          slow: Callable[[str], bool] | None = None) -> list[list[int]]:
    """The models' indices by process: one unit per `group` value; units with a `slow` model first, then
    the largest units first (stable). `--all` names the diffusers models last, and their VAE group (eight
    models, one process) ran alone at the end of the run when units started in model order; then Wan2.2,
    the last model named, ran alone for its last 81 s. Started first, a long unit overlaps the short ones."""
    found: dict[str, list[int]] = {}
    for index, model_id in enumerate(model_ids):
        found.setdefault(group(model_id) if group else model_id, []).append(index)

    def order(unit: list[int]) -> tuple[bool, int]:
        return (not (slow and any(slow(model_ids[i]) for i in unit)), -len(unit))

    return sorted(found.values(), key=order)


def _run_here(model_id: str, work: Callable[[str], Any]) -> Outcome:
    from solbench.spec.errors import SpecError

    wall, cpu = time.perf_counter(), time.process_time()
    outcome = Outcome(model_id)
    try:
        outcome.result = work(model_id)
    except SpecError as exc:
        outcome.error, outcome.bad_input = str(exc), True
    outcome.wall_s, outcome.cpu_s = time.perf_counter() - wall, time.process_time() - cpu
    return outcome


def _worker(model_ids: list[str], work: Callable[[str], Any], tasks: Connection, conn: Connection) -> None:
    """Run the units the parent sends (lists of indices into `model_ids`) until it sends None; on one intra-op
    thread, as the other processes share the cores (`threads`). The process is kept across units: what a
    model imports lazily (transformers' modeling code, diffusers' models, `torch.export`'s machinery: 2-3 s
    a model) is imported once per worker, not once per unit."""
    import torch

    torch.set_num_threads(1)
    while True:
        try:
            indices = tasks.recv()
        except (EOFError, OSError):
            break
        if indices is None:
            break
        _run_unit([model_ids[i] for i in indices], work, conn)
    conn.close()


def _run_unit(model_ids: list[str], work: Callable[[str], Any], conn: Connection) -> None:
    """A unit's models in order, inside one `reuse.session()`, each outcome sent as soon as it is known."""
    with reuse.session():
        for model_id in model_ids:
            try:
                outcome = _run_here(model_id, work)
            except BaseException as exc:  # noqa: BLE001 - a crash is this model's outcome, reported by the parent
                last = traceback.extract_tb(exc.__traceback__)[-1:]
                where = f" at {last[0].filename.rsplit('/', 1)[-1]}:{last[0].lineno}" if last else ""
                text = str(exc).splitlines()[0][:200] if str(exc) else ""
                outcome = Outcome(model_id, error=f"{type(exc).__name__}: {text}{where}")
            try:
                payload = pickle.dumps(outcome)
            except Exception as exc:  # noqa: BLE001 - an unpicklable result is reported, not lost silently
                payload = pickle.dumps(Outcome(model_id, error=f"its result cannot be sent back: {exc}"))
            conn.send_bytes(payload)


@dataclass
class _Kept:
    """A worker process and the unit it is running (`indices`: its models not yet reported; empty when idle)."""

    process: Any
    tasks: Connection  # the parent's end: units to run, None to stop
    indices: list[int] = field(default_factory=list)
    started: float = 0.0
    deadline: float | None = None


def _run_forked(model_ids: list[str], units: list[list[int]], work: Callable[[str], Any], jobs: int,
                done: Callable[[int, Outcome], None], timeout_s: float | None) -> list[Outcome]:
    """Up to `jobs` kept workers, each given the next unit when it has reported its last; a worker that dies
    or runs past its unit's deadline has that unit's unreported models named and is replaced."""
    context = multiprocessing.get_context("fork")
    outcomes: list[Outcome | None] = [None] * len(model_ids)
    workers: dict[Connection, _Kept] = {}

    def finish(index: int, outcome: Outcome) -> None:
        outcomes[index] = outcome
        done(index, outcome)

    def assign(worker: _Kept) -> None:
        worker.indices = units.pop(0)
        worker.started = time.perf_counter()
        worker.deadline = worker.started + timeout_s * len(worker.indices) if timeout_s else None
        worker.tasks.send(list(worker.indices))

    try:
        while units or workers:
            for worker in [w for w in workers.values() if not w.indices and units]:
                assign(worker)
            while units and len(workers) < jobs:
                receive, send = context.Pipe(duplex=False)
                tasks_receive, tasks_send = context.Pipe(duplex=False)
                process = context.Process(target=_worker, args=(model_ids, work, tasks_receive, send), daemon=True)
                process.start()
                send.close()
                tasks_receive.close()
                workers[receive] = worker = _Kept(process, tasks_send)
                assign(worker)
            ready = wait(list(workers), timeout=1.0)
            for conn, worker in list(workers.items()):
                ended = ""
                if conn in ready:
                    try:
                        outcome = pickle.loads(conn.recv_bytes())
                        finish(worker.indices.pop(0), outcome)
                    except (EOFError, OSError):
                        worker.process.join()
                        ended = f"its process died (exit {worker.process.exitcode})"
                elif worker.deadline is not None and time.perf_counter() > worker.deadline:
                    worker.process.kill()
                    ended = f"timed out after {timeout_s:.0f} s"
                if not ended and (worker.indices or units):
                    continue
                for index in worker.indices:
                    finish(index, Outcome(model_ids[index], error=ended, wall_s=time.perf_counter() - worker.started))
                _stop(worker, conn)
                del workers[conn]
    finally:  # an interrupt or an error here: no worker outlives the run (a busy one is killed, an idle one told)
        for conn, worker in workers.items():
            if worker.indices:
                worker.process.kill()
            _stop(worker, conn)
    return [o for o in outcomes if o is not None]


def _stop(worker: _Kept, conn: Connection) -> None:
    """Tell an idle worker to end (a dead or killed one has already), and reap it."""
    try:
        worker.tasks.send(None)
    except (OSError, ValueError):  # its end is gone: it died
        pass
    worker.tasks.close()
    conn.close()
    worker.process.join()
