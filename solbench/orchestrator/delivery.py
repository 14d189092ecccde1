"""A solution's outputs on their way to the reference worker's judge.

Small outputs arrive here as tensors (bytes on the wire) and go on as tensors. Large GPU outputs arrive
as CUDA IPC descriptors (`solbench.protocol.descriptors`): they are checked against the definition,
copied into the reference worker (`receive`), or fetched from the solution's worker as bytes when IPC
cannot carry them; either way the solution's worker then releases its exports. Anything else the
solution's worker sends in place of an output is a forgery.
"""

from __future__ import annotations

import torch

from solbench.orchestrator.session import DeviceSession, StepFailed
from solbench.protocol import descriptors
from solbench.protocol import messages as msg
from solbench.spec import dtypes
from solbench.spec.trace import Status


def deliver(session: DeviceSession, outputs, expected: list | None, timeout_s: float):
    """`outputs` as the reference worker's judge takes them. `expected`: (dtype, shape) per output
    position from the definition, when known."""
    if type(outputs) is not list:
        session.retire(session.candidate)
        raise StepFailed(Status.REWARD_HACK, f"the solution's worker sent its outputs as a {type(outputs).__name__}")
    odd = [type(v).__name__ for v in outputs
           if type(v) not in (torch.Tensor, int, float, bool) and not descriptors.is_descriptor(v)]
    if odd:  # e.g. a placeholder for a copy the reference worker holds: the harness never sends one
        session.retire(session.candidate)
        raise StepFailed(Status.REWARD_HACK, f"the solution's worker sent outputs that are neither tensors, "
                                             f"numbers nor IPC descriptors: {odd[:5]}")
    positions = [i for i, value in enumerate(outputs) if descriptors.is_descriptor(value)]
    if not positions:
        return outputs
    specs = _checked_descriptors(session, outputs, positions, expected)
    tokens = [s.token for s in specs]
    replacements = _receive(session, outputs, positions, timeout_s) if session.ipc_usable else None
    if replacements is None:
        replacements = _fetch(session, tokens, specs, timeout_s)
    session.ask(session.candidate, msg.Release(exports=tokens), min(timeout_s, 60))
    delivered = list(outputs)
    for position, value in zip(positions, replacements):
        delivered[position] = value
    return delivered


def _checked_descriptors(session: DeviceSession, outputs: list, positions: list[int],
                         expected: list | None) -> list[descriptors.Descriptor]:
    forged = None if session.ipc_offered else "CUDA IPC descriptors arrived although none were asked for"
    specs: list[descriptors.Descriptor] = []
    try:
        if forged is None:
            specs = [descriptors.check_descriptor(outputs[i], expected[i] if expected and i < len(expected) else None)
                     for i in positions]
            if len({s.token for s in specs}) != len(specs):
                raise descriptors.TransferRefused("an export id appears twice")
    except descriptors.TransferRefused as exc:
        forged = str(exc)
    if forged is not None:
        session.retire(session.candidate)
        raise StepFailed(Status.REWARD_HACK, f"forged output transfer from the solution's worker: {forged}")
    return specs


def _receive(session: DeviceSession, outputs: list, positions: list[int], timeout_s: float) -> list | None:
    """Placeholders for the reference worker's copies, or None when IPC could not carry them."""
    try:
        reply = session.ask(session.reference, msg.Receive(exports=[outputs[i] for i in positions]), timeout_s)
    except StepFailed as exc:  # the reference worker failed or died opening them: bytes from here on
        _ipc_fallback(session, f"the reference worker failed to open them ({exc.status.value}): {exc.log.strip()[-200:]}")
        return None
    if reply.transfer_error == "forged":
        session.retire(session.candidate)
        raise StepFailed(Status.REWARD_HACK, "forged output transfer from the solution's worker: "
                         + str(reply.detail)[:500])
    wanted = sorted(outputs[i][descriptors.IPC_KEY] for i in positions)
    if reply.transfer_error is not None or reply.received != wanted:
        if reply.healthy is False:
            session.retire(session.reference)  # its CUDA context is broken: the next request gets a fresh one
        _ipc_fallback(session, str(reply.detail or "the reference worker did not confirm the copies")[:300])
        return None
    return [{descriptors.RECEIVED_KEY: outputs[i][descriptors.IPC_KEY]} for i in positions]


def _ipc_fallback(session: DeviceSession, reason: str) -> None:
    session.ipc_usable = False
    note = f"transfer: CUDA IPC unavailable, outputs sent as bytes ({reason})"
    if note not in session.runtime_warnings:
        session.runtime_warnings.append(note)
    if not session.reference.alive and session.reference_job is not None:
        session.load(session.reference, *session.reference_job)


def _fetch(session: DeviceSession, tokens: list[int], specs: list, timeout_s: float) -> list:
    """The exports as bytes from the solution's worker, checked against their descriptors."""
    tensors = session.ask(session.candidate, msg.Fetch(exports=tokens), timeout_s).tensors
    if len(tensors) != len(specs):
        session.retire(session.candidate)
        raise StepFailed(Status.REWARD_HACK, "the solution's worker answered a fetch with something else")
    for tensor, spec in zip(tensors, specs):
        if (type(tensor) is not torch.Tensor or tuple(tensor.shape) != spec.shape
                or dtypes.name_of(tensor.dtype) != spec.dtype):
            session.retire(session.candidate)
            raise StepFailed(Status.REWARD_HACK, "the solution's worker fetched outputs unlike the ones it exported")
    return tensors
