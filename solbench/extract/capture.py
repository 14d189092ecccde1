"""Record every block call of a built model on meta tensors; `block_export` then exports each block.

One forward of the whole model per capture size runs on meta tensors, or under `FakeTensorMode` where
those cannot run it (no memory, no compute either way), with a forward pre-hook on every module, so each
block's inputs are exactly what the model passes it (arguments, keyword arguments, masks, rotary tables),
not a guess from its signature. Comparing the calls at two sizes says which dimensions are variable; each
block is then exported once (`block_export`), non-strict, on meta tensors, with those dimensions dynamic
(`Dim.AUTO`: export keeps them symbolic where the code allows and specialises them where it must).
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections import UserDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from solbench.extract.built import BuiltModel
from solbench.spec.errors import SpecError, first_line


@dataclass
class Call:
    """One recorded module call: its inputs as meta tensors, and how often the module was called."""

    args: tuple
    kwargs: dict
    count: int = 1
    # leaf index (in `leaves()`) -> (path of the rotary module whose output it is, index among that output's
    # tensors, that module's call): the cos/sin a layer was handed, so `rope_inside` can compute them inside
    sources: dict[int, tuple[str, int, Call]] = field(default_factory=dict)
    # a member of a ModuleList handed a tensor its previous sibling returned: a stack of layers, each fed the
    # one before (not a list of parallel heads, each on its own input: SAM's hypernetwork MLPs)
    follows_sibling: bool = False
    # tensors the call's own Python code made (`_OpCount`): two sizes disagreeing means its trace grows or
    # branches with the size; None where the call was not recorded (scaled, or built by hand)
    ops: int | None = None

    def leaves(self) -> list:
        return pytree.tree_leaves((self.args, self.kwargs))


def axis_points(built: BuiltModel) -> list[dict[str, int]]:
    """The model-axis values of each capture: point 0 is traced, 1 and 2 are for validation.

    Axes with fewer than three sizes repeat their last one, so every point is a valid model call."""
    count = max(3, *(len(v) for v in built.capture_axes.values())) if built.capture_axes else 1
    return [{name: sizes[min(i, len(sizes) - 1)] for name, sizes in built.capture_axes.items()}
            for i in range(count)][:3]


def record_calls(built: BuiltModel, axes: dict[str, int], dtype: torch.dtype) -> dict[str, Call]:
    """Run the model once at `axes` on meta tensors, or on fake tensors where meta tensors cannot run it;
    the first call of every submodule, by path (with the inputs that are a rotary module's output marked:
    `Call.sources`): of calls apart only in non-tensor arguments, the one whose values sort first
    (`_sorts_before`).

    Meta tensors compute shapes in C++; a fake tensor's every operation goes through Python (FLUX.1-dev's 13
    recordings: 7.0 s against 13.9). A model that reads a value unless it sees a traced (fake) tensor
    (transformers' packed-sequence check in Gemma 3n, Nemotron-H, Whisper) runs only on fake ones: a meta
    tensor has no value. Where both run, every recorded call is the same (`extract --all`: identical files)."""
    try:
        return _record(built, axes, dtype, fake=False)
    except Exception:  # noqa: BLE001 - the same call on fake tensors says whether the model runs at all
        return _record(built, axes, dtype, fake=True)


def _on_fake_tensors(fake: bool):
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode(allow_non_fake_inputs=True) if fake else contextlib.nullcontext()


def _record(built: BuiltModel, axes: dict[str, int], dtype: torch.dtype, fake: bool) -> dict[str, Call]:
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    calls: dict[str, Call] = {}
    made: dict[int, tuple] = {}  # id -> (rotary path, index, its call, the tensor: kept, so the id stays its)
    model = built.module
    previous = _previous_siblings(model)
    lineage = _Lineage()
    counter = _OpCount()
    started: dict[str, int] = {}  # path -> the count at its first call's start, until that call returns
    chained: set[str] = set()

    def hook_for(path: str):
        def hook(module, args, kwargs):
            if path in previous and previous[path] in lineage.of((args, kwargs)):
                chained.add(path)
            kept = calls.get(path)
            if kept is not None and not _sorts_before(args, kwargs, kept):
                kept.count += 1
                return
            leaves = pytree.tree_leaves((args, kwargs))
            sources = {i: made[id(x)][:3] for i, x in enumerate(leaves) if id(x) in made}
            with unset_fake_temporarily(), counter.paused():
                calls[path] = Call(*_to_meta((args, kwargs)), kept.count + 1 if kept else 1, sources=sources)
            started[path] = counter.made
        return hook

    def count_ops(path: str):
        def hook(module, args, kwargs, output):
            if path in started:
                calls[path].ops = counter.made - started.pop(path)
        return hook

    def made_by(path: str):
        def hook(module, args, kwargs, output):
            with unset_fake_temporarily(), counter.paused():
                call = Call(*_to_meta((args, kwargs)))
            for index, tensor in enumerate(flat_tensors(output)):
                made[id(tensor)] = (path, index, call, tensor)
        return hook

    def keep_output(path: str):
        def hook(module, args, kwargs, output):
            lineage.mark(output, frozenset((path,)))
        return hook

    handles = [m.register_forward_pre_hook(hook_for(p), with_kwargs=True) for p, m in model.named_modules()]
    handles += [m.register_forward_hook(count_ops(p), with_kwargs=True) for p, m in model.named_modules()]
    handles += [m.register_forward_hook(made_by(p), with_kwargs=True) for p, m in model.named_modules()
                if is_rotary(m)]
    members = set(previous.values())
    handles += [m.register_forward_hook(keep_output(p), with_kwargs=True) for p, m in model.named_modules()
                if p in members]
    try:
        with quiet(), _on_fake_tensors(fake), torch.device("meta"), torch.no_grad(), counter, lineage:
            args, kwargs = built.make_call(axes, dtype)
            model(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the model's own call fails: one line naming why, not a traceback
        if not fake:
            raise
        raise SpecError(f"{built.model_id}: its call fails on fake tensors at {axes}: "
                        f"{type(exc).__name__}: {first_line(exc)}") from None
    finally:
        for handle in handles:
            handle.remove()
    for path in chained & calls.keys():
        calls[path].follows_sibling = True
    return calls


def ops_made(module: nn.Module, call: Call) -> int | None:
    """The tensors `module`'s code makes on `call` (counted as the recording counts `Call.ops`), run on meta
    tensors, or fake ones where meta tensors cannot run it (`record_calls`): a tenth of what exporting it
    costs. None where it does not run at that call."""
    for fake in (False, True):
        counter = _OpCount()
        try:
            with quiet(), _on_fake_tensors(fake), torch.device("meta"), torch.no_grad(), counter:
                module(*call.args, **call.kwargs)
        except Exception:  # noqa: BLE001 - not callable at that size: no count, the exports decide
            continue
        return counter.made
    return None


def _sorts_before(args, kwargs, kept: Call) -> bool:
    """Whether a later call of a module, on tensors alike and apart only in other arguments, sorts before the
    kept one. The kept call must not follow a set's order: Olmo 3 and Gemma 3 call their rotary module once
    per layer type, iterating `set(config.layer_types)`, whose order changes with Python's string hashing."""
    leaves, spec = pytree.tree_flatten((args, kwargs))
    kept_leaves, kept_spec = pytree.tree_flatten((kept.args, kept.kwargs))
    if spec != kept_spec:
        return False
    values, kept_values = [], []
    for new, old in zip(leaves, kept_leaves):
        if isinstance(new, torch.Tensor) or isinstance(old, torch.Tensor):
            if not (isinstance(new, torch.Tensor) and isinstance(old, torch.Tensor)) or new.shape != old.shape \
                    or new.dtype != old.dtype:
                return False
        else:
            values.append(repr(new))
            kept_values.append(repr(old))
    return values < kept_values


class _Lineage(TorchFunctionMode):
    """Which ModuleList members' outputs each tensor was computed from (through any operations): a layer of
    a stack takes what the layers before it made (directly, or through an interleaved attention: diffusers'
    down blocks), a parallel head does not."""

    def __init__(self):
        super().__init__()
        self.origins: dict[int, tuple[torch.Tensor, frozenset]] = {}  # id -> (the tensor: kept, its origins)

    def of(self, tree) -> frozenset:
        """The members whose outputs the tensors in `tree` were computed from."""
        found: frozenset = frozenset()
        for x in pytree.tree_leaves(tree):
            entry = self.origins.get(id(x)) if isinstance(x, torch.Tensor) else None
            if entry is not None and entry[0] is x:
                found |= entry[1]
        return found

    def mark(self, output, origins: frozenset) -> None:
        for tensor in flat_tensors(output):
            self.origins[id(tensor)] = (tensor, self.of(tensor) | origins)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.origins:
            origins = self.of((args, kwargs))
            if origins:
                self.mark(out, origins)
        return out


class _OpCount(TorchFunctionMode):
    """Tensors made by torch calls in the model's own Python code (not inside a call): a call returning
    several (a `split`, an `unbind`) counts each, as export gives each its own node. A Python loop over a
    size, unrolled by any trace, makes more of them at a larger size (`blocks._grows_with_size`)."""

    def __init__(self):
        super().__init__()
        self.made = 0
        self.counting = True

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The recording's own copies (its hooks') are not the model's operations."""
        self.counting = False
        try:
            yield
        finally:
            self.counting = True

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.counting:
            self.made += len(flat_tensors(out)) if isinstance(out, tuple | list) else int(isinstance(out, torch.Tensor))
        return out


def _previous_siblings(model: nn.Module) -> dict[str, str]:
    """Each ModuleList member's path -> the path of the member before it."""
    found = {}
    for path, module in model.named_modules():
        if isinstance(module, nn.ModuleList):
            members = [f"{path}.{name}" if path else name for name, _ in module.named_children()]
            found.update(zip(members[1:], members[:-1]))
    return found


def is_rotary(module: nn.Module) -> bool:
    """A transformers rotary module: inverse frequencies held (`inv_freq`, or one per layer type:
    `full_attention_inv_freq`), forward (x, position_ids, ...) -> (cos, sin) (OLMo 3's takes the layer type)."""
    import inspect

    if not any(name.rpartition(".")[2].endswith("inv_freq") for name, _ in module.named_buffers(recurse=False)):
        return False
    return list(inspect.signature(module.forward).parameters)[:2] == ["x", "position_ids"]


def _to_meta(tree):
    """Fake tensors -> plain meta tensors of the same shape, stride and dtype (export makes its own fakes).

    A `UserDict` argument (Gemma 3n's `KVSharingDict`: the keys and values its KV-shared layers read) is no
    pytree node, so its tensors would stay hidden inside one mutable object that the rest of the forward
    keeps filling: it becomes a plain dict of what it held at the call, and its tensors the block's inputs."""
    def convert(x):
        if isinstance(x, torch.Tensor):
            return torch.empty_strided(tuple(x.shape), tuple(x.stride()), dtype=x.dtype, device="meta")
        if isinstance(x, UserDict):
            return pytree.tree_map(convert, dict(x.data))
        return x
    return pytree.tree_map(convert, tree)


def varying_dims(calls: list[Call]) -> list[set[int]] | None:
    """Per input leaf, the dimensions whose size differs between the calls; None if the calls differ
    in structure (then the block is captured with static shapes)."""
    flat = [pytree.tree_flatten((c.args, c.kwargs)) for c in calls]
    if any(spec != flat[0][1] for _, spec in flat[1:]):
        return None
    out: list[set[int]] = []
    for leaves in zip(*(f[0] for f in flat)):
        first = leaves[0]
        if isinstance(first, torch.Tensor):
            if any(not isinstance(x, torch.Tensor) or x.dim() != first.dim() for x in leaves):
                return None
            out.append({d for d in range(first.dim()) if len({x.shape[d] for x in leaves}) > 1})
        else:
            if any(x != first for x in leaves[1:]):
                return None  # a non-tensor argument changes with size: it would be baked in
            out.append(set())
    return out


def input_names(module: nn.Module, call: Call) -> list[str]:
    """A name for each tensor leaf of a call: the forward's parameter name, with a suffix inside tuples."""
    import inspect

    params = [p.name for p in inspect.signature(module.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names = []
    for path, leaf in pytree.tree_flatten_with_path((call.args, call.kwargs))[0]:
        if not isinstance(leaf, torch.Tensor):
            continue
        top = path[1]
        key = getattr(top, "key", getattr(top, "idx", 0))
        base = params[key] if isinstance(key, int) and key < len(params) else str(key)
        rest = "_".join(str(getattr(p, "key", getattr(p, "idx", ""))) for p in path[2:])
        names.append(f"{base}_{rest}" if rest else base)
    return names


@contextlib.contextmanager
def quiet():
    """transformers and export warn about meta devices and defaults; they are noise here, and so is the
    traceback torch logs when a fake tensor's meta kernel fails (the capture reports that failure in one
    line). Checks that read argument values (torch.distributions' `validate_args`: Gemma 3n builds a `Normal`
    in its forward) cannot run on fake or meta tensors and compute nothing, so they are off too."""
    from torch.distributions import Distribution

    loggers = [logging.getLogger(name) for name in ("transformers", "torch._subclasses.fake_tensor")]
    levels, validating = [logger.level for logger in loggers], Distribution._validate_args
    for logger, level in zip(loggers, (logging.ERROR, logging.CRITICAL)):
        logger.setLevel(level)
    Distribution.set_default_validate_args(False)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
        Distribution.set_default_validate_args(validating)


def flat_tensors(value: Any) -> list[torch.Tensor]:
    """The tensor leaves of a module's output, in pytree order (how export orders its outputs)."""
    return [x for x in pytree.tree_leaves(value) if isinstance(x, torch.Tensor)]
