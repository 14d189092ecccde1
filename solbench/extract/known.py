"""Values of the buffers a module computes from its config while it is built (Gemma 3n's `softcap` 50.0,
`gradient_clipping`, embedding scales, an audio attention's local causal mask, rotary `inv_freq`).

Models are built on the meta device, where every tensor loses its values. A weight is no loss: it comes
from a checkpoint, and a problem draws it at random. A non-persistent buffer is never in a checkpoint: its
value is the config's, and drawn at random it made references run at values the model never has (a
softcap of 0.1, a clamp bound below zero, an all-false attention mask). While the model is built,
`build` shadows every small meta tensor made from numbers or from other shadowed tensors with the same
computation on CPU; afterwards each module keeps its non-persistent buffers' values
(`KNOWN_ATTR`: buffer name -> CPU tensor), which survive `deepcopy`, `to()` and `to_empty()`. Validation
copies and the problems' `get_inputs` use them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

KNOWN_ATTR = "_solbench_known_buffers"
MAX_ELEMENTS = 4096  # larger buffers keep random draws (a literal of their values would swamp the reference)


class _Shadows(TorchFunctionMode):
    """Compute each small meta result again on CPU when all its tensor inputs have CPU values."""

    def __init__(self):
        super().__init__()
        self.values: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id(meta tensor) -> (it, its value)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        try:
            followed = self._shadow(func, args, kwargs, out)
        except Exception:  # noqa: BLE001 - a value that cannot be followed is simply not known
            followed = False
        if not followed and _writes(func):  # an argument written in place by it would keep a stale value
            self._forget(args, kwargs)
        return out

    def _shadow(self, func, args, kwargs, out) -> bool:
        """Whether `out`'s value was computed on CPU (then it is kept)."""
        if not isinstance(out, torch.Tensor) or out.device.type != "meta" or out.numel() > MAX_ELEMENTS \
                or _draws(func):  # a random draw is no value the config fixes
            return False
        unknown = False

        def real(x):
            nonlocal unknown
            if isinstance(x, torch.Tensor) and x.device.type == "meta":
                known = self.values.get(id(x))
                if known is None or known[0] is not x:
                    unknown = True
                    return x
                return known[1]
            if isinstance(x, torch.device) and x.type == "meta":
                return torch.device("cpu")
            return "cpu" if isinstance(x, str) and x == "meta" else x

        cpu_args, cpu_kwargs = pytree.tree_map(real, (args, kwargs))
        if unknown:
            return False
        if not any(isinstance(x, torch.Tensor) for x in pytree.tree_leaves((args, kwargs))):
            cpu_kwargs = {**cpu_kwargs, "device": "cpu"}  # a factory (torch.tensor, arange, ones)
        with torch.device("cpu"):
            value = func(*cpu_args, **cpu_kwargs)
        if not (isinstance(value, torch.Tensor) and value.shape == out.shape and value.dtype == out.dtype):
            return False
        self.values[id(out)] = (out, value)
        return True

    def _forget(self, args, kwargs) -> None:
        for x in pytree.tree_leaves((args, kwargs)):
            if isinstance(x, torch.Tensor):
                self.values.pop(id(x), None)


def _draws(func) -> bool:
    name = getattr(func, "__name__", "").lstrip("_")
    return name.startswith(("normal", "uniform", "rand", "bernoulli", "multinomial", "exponential", "cauchy",
                            "geometric", "log_normal", "dropout", "trunc_normal", "kaiming", "xavier", "orthogonal"))


def _writes(func) -> bool:
    name = getattr(func, "__name__", "")
    return (name.endswith("_") and not name.endswith("__")) or name in ("__setitem__", "__iadd__", "__imul__")


def build(make: Callable[[], nn.Module]) -> nn.Module:
    """`make()` (a module built inside a `torch.device("meta")` context), its non-persistent buffers' values
    kept on each of its modules."""
    with _Shadows() as shadows:
        module = make()
    _attach(module, shadows)
    return module


def _attach(model: nn.Module, shadows: _Shadows) -> None:
    """Keep, on each module, the CPU values of its non-persistent buffers that `shadows` followed."""
    for module in model.modules():
        known = {}
        for name, buffer in module._buffers.items():
            value = shadows.values.get(id(buffer)) if buffer is not None else None
            if name in module._non_persistent_buffers_set and value is not None and value[0] is buffer:
                known[name] = value[1].clone()
        if known:
            module.__dict__[KNOWN_ATTR] = known


def literal(value: torch.Tensor) -> str:
    """The values as Python source (`-float("inf")` where a mask holds it)."""
    text = repr(value.tolist())
    return text.replace("inf", 'float("inf")').replace("nan", 'float("nan")')


def known_buffers(module: nn.Module) -> dict[str, torch.Tensor]:
    """Every known buffer value under `module`, by its path there (`attn.softcap`)."""
    return {f"{path}.{name}" if path else name: value for path, sub in module.named_modules()
            for name, value in sub.__dict__.get(KNOWN_ATTR, {}).items()}
