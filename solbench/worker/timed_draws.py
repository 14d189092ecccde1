"""Where a timed call's inputs come from: numbers from the OS's entropy, bound at import, and call 0's set
drawn during setup on a CPU. See `timed_block` for how the block uses them."""

from __future__ import annotations

import os
import time

from solbench.inputs.seeds import call_seed
from solbench.protocol import messages as msg
from solbench.worker.inputs_cache import make_call_inputs
from solbench.worker.state import WorkerState

_perf_counter = time.perf_counter
_urandom = os.urandom


def entropy_bits(bits: int) -> int:
    """A number from the OS's entropy. Bound at import: no object a solution could find (by `gc` or by
    walking frames) and rebind decides which input a timed call gets or which output is kept."""
    return int.from_bytes(_urandom(8), "little") >> (64 - bits)


def entropy_below(n: int) -> int:
    """Uniform in [0, n) from the OS's entropy (rejection sampling, no modulo bias)."""
    bits = max(1, (n - 1).bit_length())
    while True:
        value = entropy_bits(bits)
        if value < n:
            return value


def first_fresh_set(state: WorkerState, request: msg.Time, seeds: list[int], budget_s: float) -> tuple | None:
    """On a CPU (slow draws): call 0's fresh set ((source, nonce, seed), inputs, seconds), drawn now and
    compared with the first requested set to see whether inputs depend on the seed, instead of a second
    requested set drawn only for that. Not on a GPU: cheap draws there, and graph capture runs the solution before call 0."""
    if state.is_cuda or budget_s <= 0 or len(seeds) < 2:
        return None
    started = _perf_counter()
    nonce = entropy_bits(62)
    seed = call_seed(request.block_key, 0, nonce)
    inputs = make_call_inputs(state, request.workload, seed, fresh_copy=False)[2]
    state.inputs_cache.pop(seed, None)  # used once: not worth caching
    return (0, nonce, seed), inputs, _perf_counter() - started
