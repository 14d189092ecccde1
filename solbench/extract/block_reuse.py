"""A block already extracted in this run, met again in another model: its export and validation reused.

Diffusion models share whole components' worth of blocks: FLUX.1 Fill is FLUX.1 dev but for its input
embedding (66 of 67 blocks), and the FLUX, SD3.5 and SDXL families share their VAEs' 40-odd blocks. A
block's draft and validation are a function of what `key` takes in: the module's structure
(`partition.signature`: classes, scalar attributes, parameter shapes and dtypes, the recorded calls'
shapes), everything else its modules hold (configs, processors, functions), the values of the buffers
the build followed, the calls' strides and non-tensor arguments, the model's capture and workload sizes,
the dtype, the library versions and the options. So an equal key gives the same draft, the same
validation and the same notes, told under this model's paths; nothing is compared less (the first model's
module was validated bit for bit, and this one's is the same module).

The key takes in the block's calls past the model's largest sizes too (scaled from its own calls, or
recorded: FLUX's joint blocks see text + image tokens, a sum no single axis gives), since they decide which
workloads it keeps. A block whose draft another block adjusts (`--rope-inside`) has no key. The memory
lives inside `reuse.session()`, as the models' does.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import torch

from solbench.extract import capture, far_calls, generic, partition, reuse
from solbench.extract.known import known_buffers
from solbench.extract.partition import NotEmitted


@dataclass
class Seen:
    """What extracting a block added: its forward (draft, code) or None, and the lines it reported."""

    forward: tuple[Any, Any] | None
    validations: list = field(default_factory=list)
    not_emitted: list[NotEmitted] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def key(built, block: generic.Block, points: list[dict[str, int]], dtype: torch.dtype,
        large: far_calls.LargeCalls, **options: Any) -> str | None:
    """What decides this block's extraction, hashed; None where it cannot be shared."""
    if reuse.blocks_seen() is None or type(block) is not generic.Block:
        return None
    far = []
    if capture.varying_dims(block.calls[:2]) is not None:
        if block.calls[0].ops is None or block.calls[0].ops != block.calls[1].ops:
            # its second export may find a loop and refuse the far recording for the rest of the model
            # (`blocks._grows_with_size`): only blocks that cannot do that have a key
            return None
        far = large.calls(block)  # what `blocks._draft` asks for next: a recording it would make anyway
    parts = [repr(partition.signature(block.module, block.calls)),
             [_held(sub) for sub in block.module.modules()],
             {name: value.tolist() for name, value in sorted(known_buffers(block.module).items())},
             [[_leaf(x) for x in call.leaves()] + [call.follows_sibling, call.ops, sorted(call.sources)]
              for call in [*block.calls, *far]],
             points, built.capture_axes, built.workload_axes, large.far, large.refused, str(dtype), built.library,
             built.versions, options]
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def lookup(block_key: str | None) -> Seen | None:
    seen = reuse.blocks_seen()
    return seen.get(block_key) if seen is not None and block_key is not None else None


def remember(block_key: str | None, found: Seen) -> None:
    seen = reuse.blocks_seen()
    if seen is not None and block_key is not None and block_key not in seen:
        seen[block_key] = found


def told_for(found: Seen, block: generic.Block) -> Seen:
    """`found` as this block's: its draft lists this model's paths, its reports name this block's path."""
    forward = None
    if found.forward is not None:
        draft, gen = found.forward
        hints = dict(draft.hints, module_paths=block.members[:32])
        forward = (dataclasses.replace(draft, hints=hints), gen)
    return Seen(forward, [copy.copy(v) for v in found.validations],
                [dataclasses.replace(item, path=block.path) for item in found.not_emitted], list(found.notes))


def _held(module: torch.nn.Module) -> list:
    """What a module holds besides scalars, tensors and submodules (the signature has those): a transformers
    config, an attention processor, an activation function."""
    found = []
    for name, value in sorted(vars(module).items()):
        if name.startswith("_") or partition.scalar(value) or isinstance(value, torch.nn.Module):
            continue
        found.append([name, _tensor(value) if isinstance(value, torch.Tensor) else _described(value)])
    return found


def _tensor(value: torch.Tensor) -> list:
    """A plain tensor attribute (not a parameter or buffer): its layout, and its values where it has them
    (a table made on CPU at build time becomes a constant of the reference)."""
    known = value.device.type != "meta"
    digest = hashlib.sha256(value.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes()
                            ).hexdigest() if known and value.numel() else ""
    return ["tensor", list(value.shape), str(value.dtype), value.device.type, digest]


def _described(value: Any) -> Any:
    if hasattr(value, "to_dict"):  # a config: every field but where it was loaded from
        return {k: v for k, v in value.to_dict().items() if k != "_name_or_path"}
    if isinstance(value, (dict, list, tuple, set, frozenset)):
        return repr(value)
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{getattr(value, '__module__', '')}.{value.__qualname__}"
    return [type(value).__module__, type(value).__qualname__, repr(sorted(vars(value).items())) if
            hasattr(value, "__dict__") else repr(value)]


def _leaf(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return ["tensor", list(x.shape), list(x.stride()), str(x.dtype)]
    return ["value", repr(x)] if partition.scalar(x) else ["object", _described(x)]
