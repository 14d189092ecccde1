"""Attention and decoder layers with their RoPE table computed inside: positions in, not cos/sin.

transformers builds the cos/sin table once per forward, in the model's rotary module, and hands it to
every layer; the templates and the generic capture take it as two inputs, as the modules do. A kernel that
fuses RoPE computes the angles from the positions in its prologue instead and never reads a table, and
the official dataset has such problems (a decoder layer or GQA attention taking `position_ids` and
`inv_freq`). With `rope_inside`, each attention or decoder-layer block that was handed a rotary module's
output is also captured fused with that module: the block's own class and code, called with
`position_ids` where it took the table, the rotary module's `inv_freq` an input like the weights.
Which argument held the table is known from the model's own call (`Call.sources`), not guessed.
"""

from __future__ import annotations

import copy
import inspect
import types
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils import _pytree as pytree

from solbench.extract.backward import kind_of
from solbench.extract.capture import Call, input_names
from solbench.extract.draft import Arg, Draft
from solbench.extract.generic import Block

KINDS = ("attention", "layer")  # block kinds fused with their table (`backward.kind_of`)
POSITIONS = "position_ids"
ROTARY_CHILD = "rotary_emb"  # the rotary module's name inside the fused block: its input is `rotary_emb_inv_freq`
SUFFIX = "WithRopeInside"


@dataclass
class FusedBlock(Block):
    """A block called with positions: its recorded calls are made from the block's and the rotary module's."""

    inner: Block | None = None  # the block as the model calls it
    rotary: str = ""  # the rotary module's path
    argument: str = ""  # the block's argument that held the table

    def call_in(self, recorded: dict[str, Call]) -> Call | None:
        return fused_call(self.module, recorded.get(self.inner.path), self.argument)

    def grad_flags_in(self, flags: dict[str, list[bool]]) -> list[bool] | None:
        """The block's flags matched by input name (the table's dropped; positions take no gradient)."""
        inner_flags = flags.get(self.inner.path)
        if inner_flags is None:
            return None
        by_name = dict(zip(input_names(self.inner.module, self.inner.calls[0]), inner_flags))
        return [by_name.get(name, False) for name in input_names(self.module, self.calls[0])]

    def finish(self, draft: Draft) -> None:
        """Positions drawn as positions (zeros would give cos 1 and sin 0, hiding the rotation), bounded by
        the model's context; the inverse frequencies as RoPE's geometric series, not random values."""
        config = getattr(self.module._modules[ROTARY_CHILD], "config", None)
        draft.axes.setdefault("max_positions", ("const", int(getattr(config, "max_position_embeddings", 0) or 8192),
                                                "Largest position"))
        draft.inputs = [_arg(arg) for arg in draft.inputs]
        draft.hints["rope_inside"] = f"{self.rotary}'s table computed inside {self.inner.path}"


def blocks(model: nn.Module, kinds: list[Block], calls: list[dict[str, Call]]) -> list[FusedBlock]:
    """A fused block for each attention or layer block (of `kinds`) handed one rotary module's whole output
    in one argument."""
    modules = dict(model.named_modules())
    out = []
    for block in kinds:
        if kind_of(block) not in KINDS:
            continue
        found = _table_argument(block.module, block.calls[0])
        if found is None:
            continue
        argument, rotary_path, rotary_call = found
        fused = _fused_module(block.module, modules[rotary_path], argument, rotary_call)
        if fused is None:
            continue
        candidate = FusedBlock(block.path, block.class_name + SUFFIX, fused, [], list(block.members),
                               inner=block, rotary=rotary_path, argument=argument)
        candidate.calls = [candidate.call_in(c) for c in calls]
        if all(made is not None for made in candidate.calls):
            out.append(candidate)
    return out


def _table_argument(module: nn.Module, call: Call) -> tuple[str, str, Call] | None:
    """(argument name, rotary path, the rotary module's call) when one argument of the call is exactly one
    output of one rotary module call, its tensors in order."""
    leaves = call.leaves()
    made = {id(leaves[i]): source for i, source in call.sources.items()}
    for name, value in (_bound(module, call) or {}).items():
        sources = [made.get(id(x)) for x in pytree.tree_leaves(value)]
        if not any(sources):
            continue
        if None in sources or len({id(s[2]) for s in sources}) != 1 or \
                [s[1] for s in sources] != list(range(len(sources))):
            return None  # the table mixed with something else: not a plain (cos, sin) argument
        return name, sources[0][0], sources[0][2]
    return None


def _bound(module: nn.Module, call: Call | None) -> dict | None:
    """The call's arguments by parameter name of the module class's forward (keyword extras merged in);
    None for a call it cannot bind or a forward given *args."""
    if call is None:
        return None
    signature = inspect.signature(type(module).forward)
    try:
        bound = signature.bind(module, *call.args, **call.kwargs)
    except TypeError:
        return None
    named = {}
    for name, value in list(bound.arguments.items())[1:]:
        kind = signature.parameters[name].kind
        if kind == inspect.Parameter.VAR_POSITIONAL:
            if value:
                return None
        elif kind == inspect.Parameter.VAR_KEYWORD:
            named.update(value)
        else:
            named[name] = value
    return named


def _fused_module(block: nn.Module, rotary: nn.Module, argument: str, rotary_call: Call) -> nn.Module | None:
    """A shallow copy of the block (same class, same parameters) holding the rotary module as a child, whose
    forward computes the table from `position_ids` and runs the block's own forward with it. The rotary
    module's other arguments (OLMo 3's layer type) are those of the call that made this block's table."""
    rotary_args = _bound(rotary, rotary_call)
    if rotary_args is None or POSITIONS not in rotary_args or \
            any(isinstance(x, torch.Tensor) for k, v in rotary_args.items() if k not in ("x", POSITIONS)
                for x in pytree.tree_leaves(v)):
        return None
    extra = {k: v for k, v in rotary_args.items() if k not in ("x", POSITIONS)}
    fused = copy.copy(block)
    fused._modules = dict(block._modules)
    fused._modules[ROTARY_CHILD] = rotary
    takes_positions = POSITIONS in inspect.signature(type(block).forward).parameters

    def forward(self, **named):
        positions = named[POSITIONS] if takes_positions else named.pop(POSITIONS)
        like = next(v for v in named.values() if isinstance(v, torch.Tensor) and v.is_floating_point())
        named[argument] = self._modules[ROTARY_CHILD](like, positions, **extra)
        return type(self).forward(self, **named)

    fused.forward = types.MethodType(forward, fused)
    return fused


def fused_call(fused: nn.Module, call: Call | None, argument: str) -> Call | None:
    """The fused block's call: the block's arguments by name (its class's forward binds them), the table's
    replaced by the positions its rotary module was called with in that same forward."""
    named = _bound(fused, call)
    found = _table_argument(fused, call) if call is not None else None
    rotary = _bound(fused._modules[ROTARY_CHILD], found[2]) if found and found[0] == argument else None
    if named is None or rotary is None or POSITIONS not in rotary:
        return None
    out = {}
    for name, value in named.items():
        if name == argument:
            out[POSITIONS] = rotary[POSITIONS]
        elif name != POSITIONS:
            out[name] = value
    return Call((), out, call.count)


def _arg(arg: Arg) -> Arg:
    if arg.name == POSITIONS:
        return Arg(arg.name, arg.shape, arg.dtype, "positions (the rotary table is computed from them inside)",
                   init="token_ids", high="max_positions")
    if arg.name.startswith(ROTARY_CHILD) and arg.name.endswith("inv_freq"):  # OLMo 3: `..._full_attention_inv_freq`
        return Arg(arg.name, arg.shape, arg.dtype, "RoPE's inverse frequencies (fixed at init)", init="inv_freq")
    return arg
