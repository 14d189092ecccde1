"""The key of a reused reference fact (a baseline's time, the eager reference's samples and input flags):
a hash of everything the fact depends on, derived here in the orchestrator from the problem it holds and
the machine it runs on, never from what a worker reported.

A key once named the workload by its uuid. A problem sent by content with the same definition and uuid but
a batch twice as large then stored a reference time 2x too slow under the real problem's key, and an honest
candidate read 1.93x. The key now takes the definition's content (its reference code included), the
workload's full content (axis values, input specs, tolerance) with the sha256 of every safetensors blob it
reads, the shipped baseline's content, the device's model and clock facts (NVML), the torch/Triton/CUDA/
Python/solbench versions installed here (the workers import the same ones), and the settings.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path

from solbench import __version__ as SOLBENCH_VERSION
from solbench.orchestrator.devices import nvml_query, torch_cuda_version
from solbench.spec.errors import SpecError
from solbench.spec.problem import Problem, baseline_solution
from solbench.spec.solution import Solution
from solbench.spec.workload import Workload

HASH_CHUNK_BYTES = 1 << 20


def _sha256(payload: object) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def definition_content_hash(problem: Problem) -> str:
    """What the reference computes: the definition with its reference code, not the folder's name."""
    return _sha256(problem.definition.to_dict())


@functools.lru_cache(maxsize=256)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    """A blob's content hash, computed once per (path, size, mtime): blobs can be gigabytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as blob:
        while chunk := blob.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def blob_hash(relative: str, roots: Sequence[Path]) -> str:
    """The sha256 of the file a safetensors input reads, or why there is none (then nothing is measured)."""
    from solbench.inputs.errors import (  # inner: the package imports torch (blobs only)
        InputError,
        MissingDataError,
    )
    from solbench.inputs.safetensors_blobs import resolve_blob  # inner: imports torch, needed only for blobs

    try:
        path = resolve_blob(relative, roots)
        stat = path.stat()
        return _file_sha256(str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    except (InputError, MissingDataError, OSError) as exc:
        return f"unreadable: {type(exc).__name__}"


def workload_content_hash(workload: Workload, roots: Sequence[Path]) -> str:
    """The workload's full content (uuid, axes, input specs, tolerance) and the content of its blobs."""
    blobs = {name: blob_hash(source.path, roots) for name, source in sorted(workload.inputs.items())
             if source.kind == "safetensors" and source.path}
    return _sha256({"workload": workload.to_dict(), "blobs": blobs})


def baseline_content_hash(problem: Problem) -> str:
    """The shipped optimised baseline's content ("" without one, or where it is unusable: then nothing is kept)."""
    try:
        solution = baseline_solution(problem)
    except SpecError:
        return ""
    return solution.content_hash() if solution is not None else ""


def _installed(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def software_facts() -> dict:
    """The versions the workers run (they start from this interpreter and its packages), read without imports."""
    return {"torch": _installed("torch"), "torch_cuda": torch_cuda_version(), "triton": _installed("triton"),
            "python": sys.version.split()[0], "solbench": SOLBENCH_VERSION}


def _nvml_index(device: str) -> int | None:
    index = int(device.partition(":")[2] or 0)
    variable = os.environ.get("CUDA_VISIBLE_DEVICES")
    if variable is None:
        return index
    entries = [e.strip() for e in variable.split(",")]
    return int(entries[index]) if index < len(entries) and entries[index].isdigit() else None


@functools.cache
def device_facts(device: str) -> dict:
    """The device's model and clock ceilings as NVML reports them to this process (a CPU: its model)."""
    if not device.startswith("cuda"):
        return {"device": "cpu", "model": platform.processor() or platform.machine()}
    index = _nvml_index(device)
    if index is None:  # UUIDs or MIG names in CUDA_VISIBLE_DEVICES: named as given
        return {"device": device, "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}

    def query(nvml) -> dict:
        handle = nvml.handle_by_index(index)
        return {"device": "cuda", "model": nvml.name(handle), "capability": list(nvml.cuda_capability(handle)),
                "max_sm_mhz": nvml.max_clock_mhz(handle, "sm"), "max_mem_mhz": nvml.max_clock_mhz(handle, "mem")}

    return nvml_query(query) or {"device": device, "model": "unknown (no NVML)"}


def reuse_key(problem: Problem, workload: Workload, kind: str, device: str, clocks_locked: bool, settings: str,
              data_roots: Sequence[Path]) -> str:
    """The key of a reused fact of `kind` ("eager", "compile" or "shipped"); `settings` names the timing settings
    and input sets the block ran with."""
    facts = {"kind": kind, "definition": definition_content_hash(problem),
             "workload": workload_content_hash(workload, data_roots),
             "baseline": baseline_content_hash(problem) if kind == "shipped" else "",
             "device": device_facts(device), "clocks_locked": bool(clocks_locked), "software": software_facts(),
             "settings": settings}
    return _sha256(facts)


def load_key(problem: Problem, solution: Solution, data_roots: Sequence[Path]) -> tuple:
    """What a worker's load holds: the definition's content (its reference code included), the solution's
    content, the problem's folder and the data roots it may read. A trusted process whose last load had the
    same key holds the same code and may serve the next call without loading it again (a service's or an
    Evaluator's reference worker, candidate after candidate); any other content loads afresh. Not the problem
    object's identity: a later call's object may get the id of a freed one."""
    return (problem.name, definition_content_hash(problem), solution.content_hash(), str(problem.directory),
            tuple(str(p) for p in data_roots))


def may_share_process(session, worker, problem: Problem) -> bool:
    """Whether a process that ran a trusted load (a reference, or the reference as solution) may take another:
    always in a run (its problems are the user's own), and in a service (`process_per_problem`) only for the
    same definition content, since a reference sent by content is anyone's code and could leave the process
    changed (torch patched) for the next problem, whose reference outputs judge candidates."""
    if not getattr(session, "process_per_problem", False):
        return True
    last = session.reference_job if worker is session.reference else session.candidate_job
    return last is not None and definition_content_hash(last[0]) == definition_content_hash(problem)
