"""What a solution hands back, before any number is compared.

`normalize_outputs` turns the return value of a value-returning solution (or reference) into a list
in definition output order. Accepted shapes of a result:

* one output: the tensor itself (or a one-element tuple/list, or a one-key dict);
* several outputs: a tuple/list with exactly one entry per output, in order;
* a dict keyed by output names: exactly the declared names (a missing or an extra key is an error:
  an extra key is a sign the solution answers a different question);
* a `shape: null` output: a Python int/float/bool (a 0-d plain tensor is accepted and `.item()`ed).

Anything else raises `OutputError` (the runner reports RUNTIME_ERROR for a solution,
INVALID_REFERENCE for the reference).

`structural_check` runs in the worker, on the device, before outputs are copied to the CPU:

* every tensor output is exactly `torch.Tensor` (not a subclass, FakeTensor, or lazy proxy whose
  values would only be computed when the harness reads them, outside the timed region), strided,
  not on the `meta` device -> otherwise REWARD_HACK;
* shape, then dtype, per output in order -> INCORRECT_SHAPE / INCORRECT_DTYPE;
* no output shares memory with an input or with another output -> otherwise REWARD_HACK. Returning
  a view of an input lets a kernel "compute" a copy/reshape/transpose/slice-like operator in zero
  time, and overlapping outputs let one write serve two results. Memory is compared as the byte span
  each tensor can touch (`data_ptr()` to the last addressable element) on the same device; empty
  tensors never alias. Two outputs carved from one buffer as disjoint contiguous slices are fine;
  interleaved strided views of one buffer are reported (return separate tensors).
"""

from __future__ import annotations

import numbers
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from solbench.spec import dtypes
from solbench.spec.definition import Definition
from solbench.spec.trace import Status


class OutputError(RuntimeError):
    """A result that cannot be read as the declared outputs."""


def normalize_outputs(result: Any, definition: Definition, axis_values: dict[str, int] | None = None) -> list:
    """The result as a list in definition output order (no values are changed or moved)."""
    names = list(definition.outputs)
    cls = type(result)  # never isinstance: a `__class__` property would run the solution's code
    if issubclass(cls, (Mapping, tuple, list)):
        container = plain_container(result)
    if issubclass(cls, Mapping):
        keys = set(dict.keys(container))
        missing, extra = [n for n in names if n not in keys], sorted(map(str, keys - set(names)))
        if missing or extra:
            raise OutputError(f"returned dict keys do not match the outputs {names}: "
                              f"missing {missing}, unexpected {extra}")
        items = [dict.__getitem__(container, n) for n in names]
    elif issubclass(cls, (tuple, list)):
        if len(container) != len(names):
            raise OutputError(f"returned {len(container)} values, the definition has {len(names)} outputs {names}")
        items = container
    elif len(names) == 1:
        items = [result]
    else:
        raise OutputError(f"returned a single {type(result).__name__}; the definition has {len(names)} "
                          f"outputs {names}: return a tuple in that order or a dict keyed by name")
    return [_one(name, item, definition.outputs[name].shape is None) for name, item in zip(names, items)]


class LazyContainer(OutputError):
    """A result container whose reading would run the solution's code (outside the timed window)."""


# What a result container may redefine without changing what reading it returns: a NamedTuple or a
# torch.return_types structseq adds fields and a repr; nothing that hands out items.
_READERS = {tuple: ("__getitem__", "__iter__", "__len__", "__reversed__", "__contains__", "__class_getitem__"),
            list: ("__getitem__", "__iter__", "__len__", "__reversed__", "__contains__"),
            dict: ("__getitem__", "__iter__", "__len__", "keys", "values", "items", "get", "__contains__",
                   "__missing__")}


def plain_container(result: Any) -> list | dict:
    """A result's items as a plain list (tuple, list, NamedTuple) or dict, read through the built-in
    types' own methods. Exactly tuple, list, dict, or a subclass that redefines no way of reading its
    items (a NamedTuple); any other container is refused (`LazyContainer`): its code would compute
    items when the harness reads them, after the timer stopped."""
    cls = type(result)
    if cls is OrderedDict:  # the standard library's own: its items are the dict's
        return dict(dict.items(result))
    base = next((b for b in (tuple, list, dict) if issubclass(cls, b)), None)
    if base is None:
        raise LazyContainer(f"returned a {cls.__module__}.{cls.__qualname__}: results must be a tensor, or a "
                            f"tuple, list, NamedTuple or dict of them")
    if cls is not base:
        redefined = sorted({m for k in cls.__mro__[:cls.__mro__.index(base)] for m in _READERS[base]
                            if m in vars(k) and m != "__class_getitem__"})
        if redefined:
            raise LazyContainer(f"returned a {cls.__module__}.{cls.__qualname__} that redefines {redefined}: "
                                f"results must be a plain tuple, list, NamedTuple or dict")
    if base is dict:
        return {k: dict.__getitem__(result, k) for k in dict.keys(result)}
    return [base.__getitem__(result, k) for k in range(base.__len__(result))]


def _one(name: str, item: Any, scalar: bool):
    if scalar:
        if type(item) is torch.Tensor and item.dim() == 0:
            return item.item()
        if issubclass(type(item), numbers.Number) and not issubclass(type(item), complex):
            return item
        raise OutputError(f"output {name!r} is a Python scalar (shape null); got {type(item).__name__}")
    if issubclass(type(item), torch.Tensor):  # the exact type is checked next (`structural_check`)
        return item
    raise OutputError(f"output {name!r} must be a tensor, got {type(item).__name__}")


def byte_span(t: torch.Tensor) -> tuple[int, int] | None:
    """[start, end) of the bytes a tensor can address, or None when it addresses none."""
    if t.numel() == 0:
        return None
    extent = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))  # torch strides are >= 0
    start = t.data_ptr()
    return start, start + (extent + 1) * t.element_size()


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.device != b.device:
        return False
    span_a, span_b = byte_span(a), byte_span(b)
    if span_a is None or span_b is None:
        return False
    if not (span_a[0] < span_b[1] and span_b[0] < span_a[1]):
        return False
    return _share_elements(a, b)


def _share_elements(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two views whose byte ranges overlap really share a byte (strided views can interleave,
    e.g. channel slices `x[:, :256]` and `x[:, 256:512]` of one buffer, without sharing anything)."""
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return True  # overlapping ranges of different storages: be conservative
    if a.element_size() != b.element_size():
        return True
    size = a.element_size()
    storage_numel = a.untyped_storage().nbytes() // size
    base = torch.arange(storage_numel, device=a.device)
    mark = torch.zeros(storage_numel, dtype=torch.bool, device=a.device)
    mark[base.as_strided(a.shape, a.stride(), a.storage_offset()).reshape(-1)] = True
    return bool(mark[base.as_strided(b.shape, b.stride(), b.storage_offset()).reshape(-1)].any())


def input_aliases(outputs: Sequence, definition: Definition, inputs: Sequence) -> list[str]:
    """Inputs that some output shares memory with (a reference that updates a cache in place and
    returns it does this; a solution may do what its reference does, and nothing more)."""
    names = list(definition.inputs)
    found = []
    for name, tensor in zip(names, inputs):
        if isinstance(tensor, torch.Tensor) and any(isinstance(o, torch.Tensor) and _overlap(o, tensor) for o in outputs):
            found.append(name)
    return found


def broadcast_outputs(outputs: Sequence, definition: Definition) -> list[str]:
    """Outputs returned as broadcast views (a dimension of stride 0 repeats its values). Such an
    output writes only its distinct elements; a solution may return one only where its reference
    does, since the speed-of-light bound counts the bytes the reference's outputs hold."""
    return [f"{name} (broadcast view)" for name, o in zip(definition.outputs, outputs)
            if isinstance(o, torch.Tensor) and any(st == 0 and sz > 1 for st, sz in zip(o.stride(), o.shape))]


def returned_views(outputs: Sequence, definition: Definition, inputs: Sequence) -> list[str]:
    """What a call's outputs share or repeat: inputs they view, and outputs that are broadcast views.
    Either is allowed for a solution only where its reference does the same."""
    return input_aliases(outputs, definition, inputs) + broadcast_outputs(outputs, definition)


def structural_check(outputs: Sequence, definition: Definition, axis_values: dict[str, int],
                     inputs: Sequence = ()) -> tuple[Status | None, str]:
    """(None, "") when the outputs are plain tensors of the declared shapes and dtypes, sharing no
    memory with the inputs or each other; otherwise the status and a message naming the output."""
    names = list(definition.outputs)
    if len(outputs) != len(names):
        return Status.INCORRECT_SHAPE, f"expected {len(names)} outputs {names}, got {len(outputs)}"
    shapes = definition.output_shapes(axis_values)
    for name, out in zip(names, outputs):
        spec = definition.outputs[name]
        if shapes[name] is None:
            if isinstance(out, torch.Tensor) or not isinstance(out, (int, float, bool)):
                return Status.INCORRECT_SHAPE, f"output {name!r} should be a Python number, got {type(out).__name__}"
            continue
        if type(out) is not torch.Tensor:
            return Status.REWARD_HACK, (f"lazy/subclassed output {name!r}: got {type(out).__module__}."
                                        f"{type(out).__qualname__}, expected exactly torch.Tensor")
        if out.layout != torch.strided or out.device.type == "meta":
            return Status.REWARD_HACK, (f"output {name!r} holds no ordinary data (layout {out.layout}, "
                                        f"device {out.device})")
        if tuple(out.shape) != tuple(shapes[name]):
            return Status.INCORRECT_SHAPE, f"output {name!r} has shape {tuple(out.shape)}, expected {tuple(shapes[name])}"
        expected = dtypes.torch_dtype(spec.dtype)
        if out.dtype != expected:
            return Status.INCORRECT_DTYPE, f"output {name!r} has dtype {out.dtype}, expected {expected}"
    tensors = [(n, o) for n, o in zip(names, outputs) if isinstance(o, torch.Tensor)]
    input_names = list(definition.inputs) + [f"#{i}" for i in range(len(definition.inputs), len(inputs))]
    input_tensors = [(n, t) for n, t in zip(input_names, inputs) if isinstance(t, torch.Tensor)]
    for name, out in tensors:
        for input_name, tensor in input_tensors:
            if _overlap(out, tensor):
                return Status.REWARD_HACK, (f"output {name!r} shares memory with input {input_name!r}: outputs must be "
                                            f"freshly written tensors, not views of inputs")
    for i, (name_a, a) in enumerate(tensors):
        for name_b, b in tensors[i + 1:]:
            if _overlap(a, b):
                return Status.REWARD_HACK, f"outputs {name_a!r} and {name_b!r} share memory"
    return None, ""


COMPARE_CHUNK_BYTES = 1 << 26


def bytes_equal(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Raw-byte equality of two same-shaped tensors (NaN payloads and signed zeros count), in chunks:
    `torch.equal` on a GPU builds an elementwise mask as large as the tensor, which does not fit beside
    a 20 GiB input. The bytes are compared as the widest integers they divide into (8-byte words
    compare several times faster than bytes on a CPU)."""
    x, y = _as_words(x), _as_words(y)
    if x.dtype != y.dtype:
        x, y = x.view(torch.uint8), y.view(torch.uint8)
    step = max(1, COMPARE_CHUNK_BYTES // x.element_size())
    return x.numel() == y.numel() and all(torch.equal(x[start:start + step], y[start:start + step])
                                          for start in range(0, x.numel(), step))


def _as_words(t: torch.Tensor) -> torch.Tensor:
    """A contiguous 1-D tensor's bytes as the widest integer type that tiles them."""
    raw = t.reshape(-1).contiguous().view(torch.uint8)
    for dtype in (torch.int64, torch.int32, torch.int16):
        size = torch.empty((), dtype=dtype).element_size()
        if raw.numel() % size == 0 and raw.data_ptr() % size == 0:
            try:
                return raw.view(dtype)
            except RuntimeError:  # a storage offset the view cannot take
                continue
    return raw
