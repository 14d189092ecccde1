"""A model's tensors in the dtypes its library gives them when it loads a checkpoint in a dtype.

Neither library loads everything in the requested dtype. diffusers keeps the weights under its
`_keep_in_fp32_modules` in fp32 at every dtype (Wan's time embedder, norms and `scale_shift_table`);
transformers keeps `_keep_in_fp32_modules_strict` in fp32 for bf16 and fp16 (Nemotron-H's router) and
`_keep_in_fp32_modules` for fp16 (T5's `wo`). Both build the model under the requested default dtype, so
a tensor made in a dtype of its own (a rotary `inv_freq` in fp32) stays so unless a checkpoint entry
overwrites it (diffusers casts every entry, transformers keeps the built dtype). A plain
`module.to(dtype)` loses all of that, and a reference captured from it would miss the casts real runs do.
`cast` applies the library's rule to a model on meta (no data: a cast costs nothing and loses nothing).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def cast(module: nn.Module, dtype: torch.dtype, library: str, built_dtype: torch.dtype | None = None) -> nn.Module:
    """`module` (on meta) with every floating tensor in the dtype `library` would load it in at `dtype`.

    `built_dtype` is the default dtype it was built under (else the dtype most of its parameters have);
    tensors in another dtype were made so on purpose. A library without a rule ("module") is treated
    as transformers without fp32 lists."""
    keep = _fp32_rule(module, dtype, library)
    built = built_dtype or _main_dtype(module)
    in_checkpoint = set(module.state_dict(keep_vars=True))
    done: dict[int, tuple] = {}  # (old, new): a tensor two modules share (tied embeddings) stays shared
    for owner_path, owner in module.named_modules(remove_duplicate=False):
        prefix = f"{owner_path}." if owner_path else ""
        for store in (owner._parameters, owner._buffers):
            for name, tensor in list(store.items()):
                if tensor is None or not tensor.is_floating_point():
                    continue
                path = prefix + name
                saved = path in in_checkpoint
                if saved and keep(path):
                    target = torch.float32
                elif saved and library == "diffusers":
                    target = dtype  # diffusers casts every floating checkpoint entry
                elif tensor.dtype != built:
                    continue  # made in a dtype of its own: loading leaves it so
                else:
                    target = dtype
                if id(tensor) in done:
                    store[name] = done[id(tensor)][1]
                elif tensor.dtype != target:
                    new = nn.Parameter(tensor.detach().to(target), requires_grad=tensor.requires_grad) \
                        if isinstance(tensor, nn.Parameter) else tensor.to(target)
                    store[name] = new
                    done[id(tensor)] = (tensor, new)
    return module


def fp32_paths(module: nn.Module, dtype: torch.dtype, library: str) -> list[str]:
    """The parameter and buffer paths `library` keeps in fp32 when it loads `module` in `dtype`."""
    keep = _fp32_rule(module, dtype, library)
    return [path for path in module.state_dict(keep_vars=True) if keep(path)]


def _fp32_rule(module: nn.Module, dtype: torch.dtype, library: str) -> Callable[[str], bool]:
    """Whether a checkpoint entry (by its path) stays fp32 when `library` loads `module` in `dtype`."""
    if dtype == torch.float32:
        return lambda path: False
    if library == "diffusers":
        names = set(getattr(module, "_keep_in_fp32_modules", None) or ())
        return lambda path: bool(names & set(path.split(".")))  # diffusers matches a component of the path
    plan_for = getattr(module, "_get_dtype_plan", None)
    plan = plan_for(dtype) if library == "transformers" and plan_for is not None else {}
    globs = [glob for glob, kept in plan.items() if kept == torch.float32]
    if not globs:
        return lambda path: False
    from transformers.core_model_loading import build_glob_alternation  # the loader's own matcher

    alternation = build_glob_alternation(globs)[0]
    return lambda path: alternation.search(path) is not None


def _main_dtype(module: nn.Module) -> torch.dtype:
    """The floating dtype most parameter elements have: what the model was built in."""
    counts: dict[torch.dtype, int] = {}
    for tensor in module.parameters():
        if tensor.is_floating_point():
            counts[tensor.dtype] = counts.get(tensor.dtype, 0) + tensor.numel()
    return max(counts, key=counts.__getitem__) if counts else torch.float32
