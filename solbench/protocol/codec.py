"""Messages to and from their dict form, strictly: what the framing carries and what a handler gets.

Decoding checks the protocol version, the op, every field's presence and declared type, and refuses any
field the harness never writes. It runs in the orchestrator on replies from a solution's worker (data
from an adversary) and in a worker on requests (a mismatch there is a harness bug, said plainly).
"""

from __future__ import annotations

import types
import typing
from dataclasses import MISSING, fields, is_dataclass
from typing import Any

from solbench.protocol.messages import PROTOCOL_VERSION, REPLIES, REQUESTS, Failed, Reply, Request


class ProtocolError(ValueError):
    """A message that is not one the harness writes: unknown op, missing or extra field, wrong type,
    wrong protocol version."""


_ENVELOPE = frozenset({"v", "op", "id"})


def encode(message: Request | Reply, request_id: int | None = None, op: str | None = None) -> dict[str, Any]:
    """The dict form of a message (`op`: which request a reply answers; requests carry their own)."""
    data: dict[str, Any] = {"v": PROTOCOL_VERSION, "op": op or message.OP, "id": request_id}
    if isinstance(message, Reply):
        data["ok"] = message.ok
    for f in fields(message):
        if not f.init:
            continue
        value = getattr(message, f.name)
        data[f.name] = value.to_dict() if is_dataclass(value) and not isinstance(value, type) else value
    return data


def decode_request(data: Any) -> tuple[int | None, Request]:
    """(request id, request) from a message's dict form, or ProtocolError."""
    _check_envelope(data)
    cls = REQUESTS.get(data["op"])
    if cls is None:
        raise ProtocolError(f"unknown op {data['op']!r}")
    return data["id"], _build(cls, {k: v for k, v in data.items() if k not in _ENVELOPE})


def decode_reply(request: Request, data: Any, request_id: int | None = None) -> Reply:
    """The reply to `request` from its dict form, or ProtocolError (also for a reply to another request)."""
    _check_envelope(data)
    if data["op"] != request.OP:
        raise ProtocolError(f"a reply for op {data['op']!r} arrived for a {request.OP!r} request")
    if request_id is not None and data["id"] != request_id:
        raise ProtocolError(f"a reply to request {data['id']!r} arrived while request {request_id} was open")
    ok = data.get("ok")
    if type(ok) is not bool:
        raise ProtocolError("a reply without a boolean 'ok'")
    cls = REPLIES[request.OP] if ok else Failed
    return _build(cls, {k: v for k, v in data.items() if k not in _ENVELOPE | {"ok"}})


def _check_envelope(data: Any) -> None:
    if type(data) is not dict:
        raise ProtocolError(f"a message is a dict, not a {type(data).__name__}")
    if data.get("v") != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {data.get('v')!r}; this side speaks {PROTOCOL_VERSION}")
    if type(data.get("op")) is not str:
        raise ProtocolError("a message without an op")
    if data.get("id") is not None and type(data.get("id")) is not int:
        raise ProtocolError(f"request id {data.get('id')!r} is not an integer")


def _build(cls: type, values: dict[str, Any]):
    hints = _hints(cls)
    known = {f.name: f for f in fields(cls) if f.init}
    extra = sorted(set(values) - set(known))
    if extra:
        raise ProtocolError(f"{cls.__name__}: unexpected field(s) {extra}")
    kwargs = {}
    for name, f in known.items():
        if name not in values:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ProtocolError(f"{cls.__name__}: missing field {name!r}")
            continue
        kwargs[name] = _field_value(cls, name, values[name], hints[name])
    return cls(**kwargs)


def _field_value(cls: type, name: str, value: Any, hint: Any) -> Any:
    model = _model_in(hint)
    if model is not None and not (value is None and _allows_none(hint)):
        if type(value) is not dict:
            raise ProtocolError(f"{cls.__name__}.{name}: {_describe(value)} where a {model.__name__} is declared")
        try:
            return model.from_dict(value)
        except (TypeError, ValueError) as exc:  # SpecError is a ValueError: one line naming the field
            raise ProtocolError(f"{cls.__name__}.{name}: {exc}") from None
    if not conforms(value, hint):
        raise ProtocolError(f"{cls.__name__}.{name}: {_describe(value)} where {_hint_name(hint)} is declared")
    return value


def _model_in(hint: Any) -> type | None:
    """The typed model a field declares (`X` or `X | None`, X a format or TimingConfig), else None: those
    travel as their dict form and are rebuilt, and checked, by the model's own `from_dict`."""
    for candidate in (hint, *typing.get_args(hint)):
        if isinstance(candidate, type) and is_dataclass(candidate) and hasattr(candidate, "from_dict"):
            return candidate
    return None


def _allows_none(hint: Any) -> bool:
    return type(None) in typing.get_args(hint)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def conforms(value: Any, hint: Any) -> bool:
    """Whether `value` (decoded JSON, tensors inside lists and dicts) has the declared type. Exact: a bool
    is not an int, an int is a float."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(conforms(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return type(value) is bool
    if hint is int:
        return type(value) is int
    if hint is float:
        return type(value) in (int, float)
    if hint is str:
        return type(value) is str
    if hint is list or origin is list:
        args = typing.get_args(hint)
        return type(value) is list and (not args or all(conforms(v, args[0]) for v in value))
    if hint is dict or origin is dict:
        args = typing.get_args(hint)
        return type(value) is dict and all(type(k) is str and (not args or conforms(v, args[1]))
                                           for k, v in value.items())
    return False


def _describe(value: Any) -> str:
    return f"a {type(value).__name__}" if not isinstance(value, list) else f"a list ({len(value)} items)"


def _hint_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
