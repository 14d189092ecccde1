"""CUDA graphs of a timed block: one per argument slot, kept only when a replay does the call's whole work.

A graph replays exactly the work captured on the capturing stream; work the call launches elsewhere
(other threads, unjoined streams) is missing from it. Timing such a graph would fail a legit kernel on
its outputs, or hide a hostile one's work: `replay_reproduces` decides, and a graph that does not
reproduce the eager call is not timed (the block is timed as launched instead).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from solbench.check.outputs import byte_span, bytes_equal
from solbench.worker.calls import as_list, invoke, refill_outputs
from solbench.worker.state import WorkerState

UNFAITHFUL = "cuda_graph_unfaithful"


def capture_graphs(state: WorkerState, slots: list,
                   fresh_values: Callable[[list], None] | None = None) -> tuple[list | None, str | None]:
    """One CUDA graph per argument slot, capturing the call on that slot's tensors, sharing one
    memory pool (they are replayed in capture order). Each slot is called once on a side stream
    first (lazy initialisation, autotuning, allocator warm-up), as capture requires. A call that
    cannot be captured (a host sync, the legacy default stream, CPU work on data) gives (None, why)
    and is timed as launched, in a new process (`orchestrator.session.DeviceSession.ask_timed`).
    `fresh_values(inputs)` writes a new input set into `inputs` (the same one at every call): the graph
    must follow it, as every timed replay sees new values. With several slots, slot 1's warm-up call runs
    on that set and is the eager answer a replay of graph 0 on it must give (`replay_matches`): the check
    costs one replay, no call of its own. With one slot, `replay_follows_inputs` calls once more.
    """
    try:
        first_inputs = [t.clone() if isinstance(t, torch.Tensor) else t for t in slots[0][0]]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        fresh_eager = None  # the eager answer on `fresh_values`' set: slot 1's warm-up call
        with torch.cuda.stream(side):
            for k, (slot_inputs, slot_outputs) in enumerate(slots):
                if k == 1 and fresh_values is not None:
                    fresh_values(slot_inputs)
                result = invoke(state, slot_inputs, slot_outputs)
                if k == 0:
                    eager = [t.clone() for t in unaliased_outputs(result, slot_inputs)]
                elif k == 1 and fresh_values is not None:
                    fresh_eager = [t.clone() for t in unaliased_outputs(result, slot_inputs)]
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        pool = torch.cuda.graph_pool_handle()
        graphs = []
        for slot_inputs, slot_outputs in slots:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                result = invoke(state, slot_inputs, slot_outputs)
            graphs.append((graph, result))
        torch.cuda.synchronize()
        if not replay_reproduces(graphs[0], slots[0][0], first_inputs, eager):
            del graphs
            return None, ("not captured whole (a replay of the graph did not reproduce the call's own output: "
                          "work outside the capturing stream, e.g. in other threads); timed as launched")
        if fresh_values is not None and not (
                replay_matches(graphs[0], slots[0][0], fresh_values, fresh_eager) if fresh_eager is not None
                else replay_follows_inputs(state, graphs[0], slots[0], fresh_values)):
            del graphs
            return None, (f"{UNFAITHFUL}: a replay on input values other than the capture's did not write what "
                          "the call itself computes on them (e.g. a cache checked in Python, which a replay never "
                          "runs); timed as launched")
    except Exception as exc:  # noqa: BLE001 - the solution's call is not capturable: time it as launched
        try:
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001, S110 - a broken capture may leave an error behind; the block reports it
            pass
        return None, f"not captured ({type(exc).__name__}: {str(exc)[:300]}); timed as launched"
    return graphs, None


def replay_reproduces(captured: tuple, slot_inputs: list, first_inputs: list, eager: list) -> bool:
    """Whether replaying a graph, on the inputs its eager call saw and with its outputs poisoned, writes
    the eager call's output bit for bit. A capture can succeed and still miss work (kernels launched by
    other threads run eagerly while the main thread captures): timing such a graph would fail a legit
    kernel with "wrong output", so it is timed as launched instead. Differences from nondeterministic
    kernels only cost the graph, never a verdict."""
    graph, result = captured
    for dst, src in zip(slot_inputs, first_inputs):
        if isinstance(dst, torch.Tensor):
            dst.copy_(src)
    outputs = unaliased_outputs(result, slot_inputs)
    refill_outputs(outputs)
    graph.replay()
    torch.cuda.synchronize()
    if len(outputs) != len(eager):
        return False
    return all(a.shape == b.shape and a.dtype == b.dtype
               and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
               for a, b in zip(outputs, eager))


def replay_matches(captured: tuple, slot_inputs: list, fresh_values: Callable[[list], None], expected: list) -> bool:
    """Whether a replay of a graph on new input values writes `expected` (the eager call's answer on those
    values, computed on another slot's tensors before any capture), bit for bit. A graph that kept something
    the capture's inputs decided (a weight copy a cache validated in Python) fails here instead of failing
    its checked outputs later. Nothing runs between the refill and the replay, as in the timed loop."""
    return same_bytes(replay_on_fresh_values(captured, slot_inputs, fresh_values), expected)


def replay_on_fresh_values(captured: tuple, slot_inputs: list, fresh_values: Callable[[list], None]) -> list:
    """Refill the slot's inputs with new values and its outputs with poison, replay, wait: the graph's
    outputs (those that alias no input). Nothing runs between the refill and the replay, as in the loop."""
    graph, result = captured
    fresh_values(slot_inputs)
    outputs = unaliased_outputs(result, slot_inputs)
    refill_outputs(outputs)
    graph.replay()
    torch.cuda.synchronize()
    return outputs


def replay_follows_inputs(state: WorkerState, captured: tuple, slot: tuple, fresh_values: Callable[[list], None]) -> bool:
    """`replay_matches` for a block of one slot, whose eager answer is the call itself on the same tensors
    afterwards: the replay comes first (an eager call first would refresh a Python-validated cache that the
    replay then reads, and the check would pass a graph the timed loop finds wrong)."""
    slot_inputs, slot_outputs = slot
    replayed = [t.clone() for t in replay_on_fresh_values(captured, slot_inputs, fresh_values)]
    fresh_values(slot_inputs)  # the same values again (a call may write into its inputs): no copy of a set
    eager = unaliased_outputs(invoke(state, slot_inputs, slot_outputs), slot_inputs)
    torch.cuda.synchronize()
    return same_bytes(replayed, eager)


def same_bytes(got: list, expected: list) -> bool:
    return len(got) == len(expected) and all(
        a.shape == b.shape and a.dtype == b.dtype and bytes_equal(a.contiguous(), b.contiguous())
        for a, b in zip(got, expected))


def unaliased_outputs(result, inputs: list) -> list:
    """A graph's output tensors that share no memory with its slot's inputs (those may be poisoned)."""
    spans = [byte_span(t) for t in inputs if isinstance(t, torch.Tensor)]
    out = []
    for t in as_list(result):
        span = byte_span(t) if isinstance(t, torch.Tensor) else None
        if span is not None and not any(s is not None and s[0] < span[1] and span[0] < s[1] for s in spans):
            out.append(t)
    return out
