"""Extract several models at once, one forked process per model, results handed back in model order.

Each model's extraction is independent (its own build, capture and seeded validation), so models can run
side by side; what is written stays byte-identical because the results are merged in the order the models
were asked for, never in the order they finish. Processes are forked from the caller, which has already
imported torch and the libraries, so a model pays no import time. Models with the same architecture facts,
and diffusers models with the same VAE, go to one process (`reuse.shipped_group`), in their order, so the
later ones reuse the first's result or its blocks. A
process that dies (out of memory, a signal) is reported for its models; the others go on.
"""

from __future__ import annotations

import multiprocessing
import pickle
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from solbench.extract import reuse


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


def _child(model_ids: list[str], work: Callable[[str], Any], conn: Connection) -> None:
    """Run a unit's models in order, sending each outcome as soon as it is known; on one intra-op thread, as
    the other processes share the cores (`threads`)."""
    import torch

    torch.set_num_threads(1)
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
    conn.close()


@dataclass
class _Running:
    process: Any
    indices: list[int]  # the unit's models not yet reported
    started: float
    deadline: float | None


def _run_forked(model_ids: list[str], units: list[list[int]], work: Callable[[str], Any], jobs: int,
                done: Callable[[int, Outcome], None], timeout_s: float | None) -> list[Outcome]:
    context = multiprocessing.get_context("fork")
    outcomes: list[Outcome | None] = [None] * len(model_ids)
    running: dict[Connection, _Running] = {}

    def finish(index: int, outcome: Outcome) -> None:
        outcomes[index] = outcome
        done(index, outcome)

    while units or running:
        while units and len(running) < jobs:
            indices = units.pop(0)
            receive, send = context.Pipe(duplex=False)
            process = context.Process(target=_child, args=([model_ids[i] for i in indices], work, send), daemon=True)
            process.start()
            send.close()
            now = time.perf_counter()
            running[receive] = _Running(process, list(indices), now,
                                        now + timeout_s * len(indices) if timeout_s else None)
        ready = wait(list(running), timeout=1.0)
        for conn, unit in list(running.items()):
            ended = ""
            if conn in ready:
                try:
                    outcome = pickle.loads(conn.recv_bytes())
                    finish(unit.indices.pop(0), outcome)
                except (EOFError, OSError):
                    unit.process.join()
                    ended = f"its process died (exit {unit.process.exitcode})"
            elif unit.deadline is not None and time.perf_counter() > unit.deadline:
                unit.process.kill()
                ended = f"timed out after {timeout_s:.0f} s"
            if not ended and unit.indices:
                continue
            for index in unit.indices:
                finish(index, Outcome(model_ids[index], error=ended, wall_s=time.perf_counter() - unit.started))
            del running[conn]
            conn.close()
            unit.process.join()
    return [o for o in outcomes if o is not None]
