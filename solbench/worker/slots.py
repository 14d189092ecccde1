"""A timed block's argument slots and the harness's memory budget for its own copies (slots, recent fresh
sets): a quarter of what the device has free, so the harness's copies of multi-GB inputs never push the
solution's call out of memory."""

from __future__ import annotations

import torch

from solbench.inputs.generate import allocate_outputs
from solbench.worker.inputs_cache import tensor_bytes
from solbench.worker.state import WorkerState

RECENT_SETS = 4  # fresh sets kept for reuse once drawing them is over the block's budget


def build_slots(state: WorkerState, sets: list[list], axes: dict, max_slots: int, budget_bytes: int) -> list:
    """Pre-allocated argument slots, so each timed call sees its inputs at another address; as many
    as `budget_bytes` holds, at least one (the trace then says so: `timed_inputs_single_slot`).
    Each starts as a copy of the template set, never uninitialised memory: a call made before the
    first `prepare` (CUDA graph warm-up and capture) must see valid inputs (indices in range,
    lengths that fit), or it fails on garbage, or captures a graph shaped by it."""
    count = int(max(1, min(max_slots, budget_bytes // max(tensor_bytes(sets[0]), 1))))
    slots = []
    for _ in range(count):
        inputs = [torch.empty_like(a).copy_(a) if isinstance(a, torch.Tensor) else a for a in sets[0]]
        outputs = allocate_outputs(state.definition, axes, state.device) if state.destination_passing else None
        slots.append((inputs, outputs))
    return slots


def harness_budget_bytes(state: WorkerState) -> int:
    """A quarter of the device memory free to this process (what its allocator caches counts as free)."""
    if not state.is_cuda:
        return 2 << 30
    free_bytes, _ = torch.cuda.mem_get_info()
    return (free_bytes + torch.cuda.memory_reserved() - torch.cuda.memory_allocated()) // 4


def recent_sets_limit(set_bytes: int, budget_bytes: int) -> int:
    """How many fresh sets to keep for reuse once generation is over budget: within budget_bytes, at least one."""
    return int(max(1, min(RECENT_SETS, budget_bytes // max(set_bytes, 1))))
