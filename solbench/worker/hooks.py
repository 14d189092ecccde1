"""Torch machinery a solution could hook to make the harness's own operations do its work.

The harness copies inputs into argument slots (`copy_`), poisons outputs (`fill_`), keeps sampled outputs
(`clone`), draws fresh inputs (`normal_`, `uniform_`, `randint`) and compares bytes (`eq`, `equal`)
with ordinary torch operations, outside the timed window. A solution that re-registers the kernel of
one of those operators (`torch.library.Library("aten", "IMPL")`), or leaves a TorchDispatchMode or
TorchFunctionMode active in the worker's main thread, would have its code run inside them: work done
while the harness refills the inputs, untimed. So the dispatcher's entries for those operators are
snapshotted when the worker starts (before any solution code) and compared after every request, and
the mode stacks must be empty. Registering custom operators in the solution's own namespace, and
torch.compile, change none of these entries (checked: tests/anticheat/test_hooks.py).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

HARNESS_OPS = ("aten::clone", "aten::copy_", "aten::fill_.Scalar", "aten::empty_like", "aten::empty_strided",
               "aten::normal_", "aten::uniform_", "aten::random_.from", "aten::randint", "aten::randn",
               "aten::eq.Tensor", "aten::ne.Tensor", "aten::equal", "aten::detach", "aten::view", "aten::_to_copy",
               "aten::sub.Tensor", "aten::abs", "aten::sum", "aten::max", "aten::count_nonzero", "aten::isfinite",
               "aten::div.Tensor", "aten::gt.Tensor", "aten::zero_", "aten::reshape", "aten::contiguous",
               "aten::_local_scalar_dense")

_dispatch_dump = torch._C._dispatch_dump
_dispatch_stack_len = torch._C._len_torch_dispatch_stack
_function_stack_len = torch._C._len_torch_function_stack


def _dump(op: str) -> str:
    try:
        return _dispatch_dump(op)
    except RuntimeError:  # an operator this torch does not have
        return ""


def make_dispatch_checker() -> Callable[[], list[str]]:
    """A function listing what changed in torch's dispatch machinery since now (called before any
    solution code runs). Its snapshot lives in its defaults, like the integrity checker's."""
    snapshot = tuple((op, _dump(op)) for op in HARNESS_OPS)

    def check(_snapshot=snapshot, _dump=_dump, _dispatch_stack_len=_dispatch_stack_len,
              _function_stack_len=_function_stack_len) -> list[str]:
        changed = [f"the dispatcher entry of {op} was re-registered" for op, before in _snapshot if _dump(op) != before]
        if _dispatch_stack_len():
            changed.append(f"{_dispatch_stack_len()} TorchDispatchMode(s) left active in the harness's thread")
        if _function_stack_len():
            changed.append(f"{_function_stack_len()} TorchFunctionMode(s) left active in the harness's thread")
        return changed

    return check
