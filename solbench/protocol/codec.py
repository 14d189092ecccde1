"""Messages to and from their dict form, strictly: what the framing carries and what a handler gets.

Decoding checks the protocol version, the op, every field's presence and declared type, and refuses any
field the harness never writes. It runs in the orchestrator on replies from a solution's worker (data
from an adversary) and in a worker on requests (a mismatch there is a harness bug, said plainly).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
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


class _Field(typing.NamedTuple):
    """What decoding needs of one message field, worked out once per message class."""

    hint: Any
    model: type | None  # a typed model the field's value is rebuilt by (`_model_in`)
    optional: bool  # the model field may be None
    required: bool


def _build(cls: type, values: dict[str, Any]):
    known = _fields(cls)
    if not values.keys() <= known.keys():
        raise ProtocolError(f"{cls.__name__}: unexpected field(s) {sorted(values.keys() - known.keys())}")
    kwargs = {}
    for name, f in known.items():
        if name not in values:
            if f.required:
                raise ProtocolError(f"{cls.__name__}: missing field {name!r}")
            continue
        kwargs[name] = _field_value(cls, name, values[name], f)
    return cls(**kwargs)


def _field_value(cls: type, name: str, value: Any, f: _Field) -> Any:
    if f.model is not None and not (value is None and f.optional):
        if type(value) is not dict:
            raise ProtocolError(f"{cls.__name__}.{name}: {_describe(value)} where a {f.model.__name__} is declared")
        try:
            return f.model.from_dict(value)
        except (TypeError, ValueError) as exc:  # SpecError is a ValueError: one line naming the field
            raise ProtocolError(f"{cls.__name__}.{name}: {exc}") from None
    if not conforms(value, f.hint):
        raise ProtocolError(f"{cls.__name__}.{name}: {_describe(value)} where {_hint_name(f.hint)} is declared")
    return value


def _model_in(hint: Any) -> type | None:
    """The typed model a field declares (`X` or `X | None`, X a format or TimingConfig), else None: those
    travel as their dict form and are rebuilt, and checked, by the model's own `from_dict`."""
    for candidate in (hint, *typing.get_args(hint)):
        if isinstance(candidate, type) and is_dataclass(candidate) and hasattr(candidate, "from_dict"):
            return candidate
    return None


_FIELDS: dict[type, dict[str, _Field]] = {}


def _fields(cls: type) -> dict[str, _Field]:
    if cls not in _FIELDS:
        hints = typing.get_type_hints(cls)
        _FIELDS[cls] = {f.name: _Field(hints[f.name], _model_in(hints[f.name]), type(None) in typing.get_args(hints[f.name]),
                                       f.default is MISSING and f.default_factory is MISSING)
                        for f in fields(cls) if f.init}
    return _FIELDS[cls]


def conforms(value: Any, hint: Any) -> bool:
    """Whether `value` (decoded JSON, tensors inside lists and dicts) has the declared type. Exact: a bool
    is not an int, an int is a float."""
    return _checker(hint)(value)


_CHECKERS: dict[Any, Callable[[Any], bool]] = {}
_EXACT: dict[Any, tuple[type, ...]] = {bool: (bool,), int: (int,), float: (int, float), str: (str,),
                                       type(None): (type(None),)}


def _checker(hint: Any) -> Callable[[Any], bool]:
    """The check for one declared type, built once per type (a reply's lists are checked item by item)."""
    check = _CHECKERS.get(hint)
    if check is None:
        check = _CHECKERS[hint] = _make_checker(hint)
    return check


def _make_checker(hint: Any) -> Callable[[Any], bool]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return lambda value: True
    if hint in _EXACT:
        exact = _EXACT[hint]
        return lambda value: type(value) in exact
    if origin in (typing.Union, types.UnionType):
        members = [_checker(arg) for arg in args]
        return lambda value: any(check(value) for check in members)
    if hint is list or origin is list:
        if not args or args[0] is Any:
            return lambda value: type(value) is list
        item = _checker(args[0])
        return lambda value: type(value) is list and all(item(v) for v in value)
    if hint is dict or origin is dict:
        entry = _checker(args[1]) if args else _checker(Any)
        return lambda value: type(value) is dict and all(type(k) is str and entry(v) for k, v in value.items())
    return lambda value: False


def _describe(value: Any) -> str:
    return f"a {type(value).__name__}" if not isinstance(value, list) else f"a list ({len(value)} items)"


def _hint_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
