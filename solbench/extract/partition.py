"""Which module calls are blocks, and which of them compute the same thing.

A block is one call of a module that a kernel author would optimise: every module the model's library
defines (layers, attention, MLP, MoE, mixers, norms, embeddings, resnet and sampler blocks) plus the
torch.nn norms. Containers, torch.nn primitives (covered by the block around them) and the whole
model are left out, each with its reason. Blocks are grouped by a structural signature taken before
any export, so a 36-layer model exports its layer once: module classes, parameter shapes and dtypes,
scalar attributes (eps, window, head counts) and the shapes of the recorded calls at every capture size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils import _pytree as pytree

from solbench.extract.capture import Call
from solbench.extract.generic import Block

NORMS = (nn.LayerNorm, nn.GroupNorm, nn.RMSNorm, nn.BatchNorm1d, nn.BatchNorm2d, nn.InstanceNorm2d)
# torch.nn modules that compute what a kernel author would write: left to the block that holds them, but a
# block of their own where no emitted block holds them (Wan's patch embedding, a Conv3d the whole model calls;
# a VAE encoder's conv_in, held by the encoder, a stack of layers)
COMPUTING = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d,
             nn.ConvTranspose3d, nn.Embedding)
PRIMITIVE = "a torch.nn primitive, computed inside the block that holds it"
NOT_CALLED = "not called by the model's forward at every capture size"
CONTAINERS = (nn.ModuleList, nn.ModuleDict, nn.Sequential, nn.ParameterList, nn.ParameterDict)


@dataclass
class NotEmitted:
    """A module (class and path) that yields no problem, and why."""

    path: str
    class_name: str
    reason: str
    by_design: bool = False  # left out on purpose (its computation is emitted elsewhere), not a gap


    def __str__(self) -> str:
        return f"{self.class_name} ({self.path or 'the model'}): {self.reason}"


def blocks(model: nn.Module, calls: list[dict[str, Call]]) -> tuple[list[Block], list[NotEmitted]]:
    """The model's distinct blocks (first path in module order represents each) and what was left out."""
    kinds: dict[tuple, Block] = {}
    left: list[NotEmitted] = []
    held: set[str] = set()  # the paths kept as blocks so far (named_modules gives a module before its children)
    orphans: set[str] = set()
    for path, module in model.named_modules():
        name = type(module).__name__
        why = _excluded(path, module, calls) or _whole_call(path, calls)
        if why == PRIMITIVE and isinstance(module, COMPUTING) and not _held(path, held):
            why = ""  # no emitted block computes it: it is one
            orphans.add(path)
        if why:
            left.append(NotEmitted(path, name, why, by_design=True))
            continue
        recorded = [c.get(path) for c in calls]
        if any(r is None for r in recorded):
            left.append(NotEmitted(path, name, NOT_CALLED) if path not in orphans else  # Voxtral's positions
                        NotEmitted(path, name, "a torch.nn primitive the model never calls (its weights are read)",
                                   by_design=True))
            continue
        held.add(path)
        key = signature(module, recorded)
        block = kinds.get(key)
        if block is None:
            kinds[key] = Block(path, name, module, recorded, [path])
        else:
            block.members.append(path)
    library_kinds = [b for b in kinds.values() if not isinstance(b.module, NORMS) and b.path not in orphans]
    if not library_kinds and calls and "" in calls[0]:  # the model is itself one block (`--module pkg:Block`)
        left = [item for item in left if item.path]
        left += [NotEmitted(b.path, b.class_name, PRIMITIVE, by_design=True) for b in kinds.values()
                 if b.path in orphans]
        kinds = {(): Block("", type(model).__name__, model, [c[""] for c in calls], [""])} | \
            {key: b for key, b in kinds.items() if b.path not in orphans}
    return list(kinds.values()), left


def _excluded(path: str, module: nn.Module, calls: list[dict[str, Call]]) -> str:
    if not path:
        return "the whole model (its blocks are emitted)"
    if isinstance(module, CONTAINERS):
        return "a container"
    if isinstance(module, NORMS):
        return ""
    if _holds_stack(path, module, calls) and not _bottleneck(module):
        return "a stack of layers (each distinct layer is emitted)"
    if type(module).__name__.endswith("Activation") and not any(True for _ in module.parameters()):
        return "an activation, computed inside the block that holds it"
    if type(module).__module__.startswith("torch."):
        return PRIMITIVE
    return ""


def _holds_stack(path: str, module: nn.Module, calls: list[dict[str, Call]]) -> bool:
    """Whether a child is a stack of layers: repeated modules, each fed what the one before returned wherever
    the recording saw them all called. Repeated modules each called on an input of its own are parallel heads
    (SAM's hypernetwork MLPs, one per mask token): their holder stays a block."""
    for name, child in module.named_children():
        if not is_layer_stack(child):
            continue
        members = [f"{path}.{name}.{n}" if path else f"{name}.{n}" for n, _ in child.named_children()][1:]
        seen = [recorded[m] for recorded in calls[:1] for m in members if m in recorded]
        if len(seen) < len(members) or any(call.follows_sibling for call in seen):
            return True
    return False


def _bottleneck(module: nn.Module) -> bool:
    """A diffusers mid block (resnet, attention, resnet at the lowest resolution) is one fixed block, not a
    stack of layers: the official dataset has a VAE's as one problem. One whose attention holds a stack of
    its own (SD-XL's ten-layer transformer) stays a stack."""
    inner = (sub for sub in module.modules() if sub is not module)
    return "MidBlock" in type(module).__name__ and not any(is_layer_stack(c) for sub in inner for c in sub.children())


def _whole_call(path: str, calls: list[dict[str, Call]]) -> str:
    """A child the model hands its whole call to (`parts.Parts`' language model) is the whole model too."""
    if "." in path or not path or not calls or any("" not in c or path not in c for c in calls):
        return ""
    for recorded in calls:
        mine, root = (pytree.tree_flatten((c.args, c.kwargs)) for c in (recorded[path], recorded[""]))
        if mine[1] != root[1] or any(getattr(a, "shape", a) != getattr(b, "shape", b)
                                     for a, b in zip(mine[0], root[0])):
            return ""
    return "the whole model (its blocks are emitted)"


def _held(path: str, held: set[str]) -> bool:
    """Whether a module kept as a block holds the module at `path`."""
    parts = path.split(".")
    return any(".".join(parts[:end]) in held for end in range(1, len(parts)))


def is_layer_stack(child: nn.Module) -> bool:
    """A ModuleList of repeated layers (two or more of one class). A list of different modules is not
    one: diffusers' `Attention.to_out` ([Linear, Dropout]) leaves its attention a block of its own."""
    if not isinstance(child, nn.ModuleList):
        return False
    classes = [type(m) for m in child]
    return any(classes.count(c) > 1 for c in set(classes))


def signature(module: nn.Module, calls: list[Call]) -> tuple:
    """What makes two module calls compute differently (never the path or the layer index)."""
    parts: list = []
    for name, sub in module.named_modules():
        attrs = tuple(sorted((k, _frozen(v)) for k, v in vars(sub).items()
                             if not k.startswith("_") and scalar(v) and k != "layer_idx"))
        parts.append((name, type(sub).__qualname__, type(sub).__module__, attrs))
    for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
        parts.append((name, tuple(tensor.shape), str(tensor.dtype)))
    for call in calls:
        parts.append(tuple(_leaf_key(x) for x in call.leaves()))
        parts.append(call.count > 1)
    return tuple(parts)


def scalar(value) -> bool:
    """A number, string or None, or a tuple or list of them: a convolution's stride and padding are tuples,
    and two convolutions that differ only there compute differently."""
    if isinstance(value, (tuple, list)):
        return all(scalar(v) for v in value)
    return isinstance(value, (int, float, bool, str, type(None)))


def _frozen(value):
    return tuple(_frozen(v) for v in value) if isinstance(value, (tuple, list)) else value


def _leaf_key(x) -> tuple:
    if isinstance(x, torch.Tensor):
        return ("tensor", tuple(x.shape), str(x.dtype))
    if isinstance(x, (int, float, bool, str, type(None))):
        return ("value", x)
    return ("object", type(x).__qualname__)
