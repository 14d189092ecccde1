"""A worker's inputs: built from seeds, cached per workload, trimmed when the other worker needs room.

Both workers of a device regenerate identical inputs from `(seed, workload)`; inputs never cross a
process boundary. Trials, judging and timed blocks reuse the cached sets (custom entrypoints can take
seconds to build one), and a call gets copies, since it may write into its inputs.
"""

from __future__ import annotations

import torch

from solbench.check.outputs import bytes_equal
from solbench.inputs.errors import InputError, MissingDataError
from solbench.inputs.generate import make_inputs
from solbench.inputs.profiles import STANDARD
from solbench.protocol import messages as msg
from solbench.spec.workload import Workload
from solbench.worker.state import Failure, WorkerState


def make_call_inputs(state: WorkerState, workload: Workload, seed: int, *, fresh_copy: bool = True,
                     profile: str = STANDARD):
    """(workload, axes, args) for (workload, seed, profile); cached per workload, handed out as copies
    unless asked not to (a call may write into its inputs, which must not change what the next request
    sees). The cache is keyed by seed; a set of another profile under the same seed is rebuilt."""
    if workload != state.inputs_cache_key:
        state.inputs_cache, state.inputs_cache_key = {}, workload
    if seed not in state.inputs_cache or state.inputs_cache[seed][3] != profile:
        state.inputs_cache.pop(seed, None)
        state.inputs_cache[seed] = (*_build_inputs(state, workload, seed, profile), profile)
    workload, axes, args, _ = state.inputs_cache[seed]
    if fresh_copy:
        args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    return workload, axes, args


def _build_inputs(state: WorkerState, workload: Workload, seed: int, profile: str) -> tuple:
    axes = state.definition.resolve_axes(workload.axes)
    entry = state.definition.custom_inputs_entrypoint
    custom = getattr(state.reference_module, entry) if entry else None
    # Every set of one workload has the same size: make room before building the next one, not
    # after (two 21 GiB sets and their generation temporaries do not fit beside each other).
    held_bytes = cached_bytes(state)
    set_bytes = max((tensor_bytes(e[2]) for e in state.inputs_cache.values()), default=0)
    if held_bytes and held_bytes + set_bytes > cache_budget_bytes(state):
        drop_input_cache(state)
    for attempt in (0, 1):
        try:
            args = make_inputs(state.definition, workload, axes, seed=seed, device=state.device,
                               data_roots=state.data_roots, custom_entrypoint=custom, profile=profile)
            return workload, axes, args
        except MissingDataError as exc:
            raise Failure("MISSING_DATA", str(exc)) from None
        except (InputError, torch.cuda.OutOfMemoryError) as exc:
            if attempt == 0 and state.inputs_cache and "OutOfMemoryError" in f"{type(exc).__name__}: {exc}":
                drop_input_cache(state)  # the cached sets were in the way: try once without them
                continue
            if isinstance(exc, InputError):
                raise Failure("INVALID_REFERENCE", f"input generation failed: {exc}") from None
            raise Failure("INVALID_REFERENCE", f"input generation failed: out of memory: {exc}") from None
    raise AssertionError("unreachable")


def tensor_bytes(values: list) -> int:
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def cached_bytes(state: WorkerState) -> int:
    return sum(tensor_bytes(entry[2]) for entry in state.inputs_cache.values())


def cache_budget_bytes(state: WorkerState) -> int:
    if state.is_cuda:
        return torch.cuda.get_device_properties(0).total_memory // 4
    return 2 << 30


def trim_threshold_bytes(state: WorkerState) -> int:
    """Caches below this stay: regenerating them would cost more than the memory they hold."""
    return cache_budget_bytes(state) // 4


def handle_trim(state: WorkerState, request: msg.Trim) -> msg.Trimmed:
    """Before the other worker is timed: drop this worker's input cache when it is large, so both
    workers' copies of multi-GB inputs do not share the device. Inputs are rebuilt from seeds on
    demand; IPC exports and received copies (transfer.py) are kept."""
    held_bytes = cached_bytes(state)
    threshold_bytes = request.min_bytes if request.min_bytes is not None else trim_threshold_bytes(state)
    if held_bytes <= threshold_bytes:
        return msg.Trimmed(freed_bytes=0, held_bytes=held_bytes)
    drop_input_cache(state)
    return msg.Trimmed(freed_bytes=held_bytes, held_bytes=0)


def drop_input_cache(state: WorkerState) -> None:
    """Forget the cached input sets (and a kept timed block's slots) and hand their memory back to the
    device (for the other worker)."""
    state.inputs_cache.clear()
    state.timed_block = None
    if state.is_cuda:
        torch.cuda.empty_cache()


def changed_tensors(before: list, after: list) -> list[int]:
    """Indices of tensor inputs whose bytes changed (NaN-safe: compares raw bytes)."""
    changed = []
    for i, (b, a) in enumerate(zip(before, after)):
        if b is None or not isinstance(a, torch.Tensor):
            continue
        if b.shape != a.shape or b.dtype != a.dtype:
            changed.append(i)
            continue
        if b.numel() == 0:
            continue
        if not bytes_equal(b, a.detach()):
            changed.append(i)
    return changed
