"""A model built on the meta device, with what it takes to call it: the seam between build and capture.

Whatever builds a model (a transformers or diffusers config, or `--module package.module:Class`) hands
the generic capture this object; capture never needs to know which library the module came from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

# axis values (e.g. {"batch_size": 2, "seq_len": 64}) and a dtype -> the model's (args, kwargs)
CallMaker = Callable[[dict[str, int], torch.dtype], tuple[tuple[Any, ...], dict[str, Any]]]


@dataclass
class BuiltModel:
    """One model, built without weights, and how to call its forward at any size of its variable axes."""

    model_id: str
    module: nn.Module  # eval mode, parameters on the meta device
    library: str  # "transformers" | "diffusers" | "module"
    make_call: CallMaker
    # each variable axis -> two or more sizes to capture at (>= 2, so no 0/1 specialisation); first = default
    capture_axes: dict[str, tuple[int, ...]]
    # each variable axis -> the real sizes workloads should span (prefill lengths, resolutions, audio lengths)
    workload_axes: dict[str, tuple[int, ...]]
    versions: dict[str, str] = field(default_factory=dict)  # library -> version, recorded in every problem
    family: str = ""  # "dense LLM" | "MoE" | "VL" | "diffusion" | "audio" | "SSM" | "vision" | ""
    root: str = ""  # the path of `module` in the model it belongs to (an encoder tower's); "" for the model
    unbuilt: dict[str, str] = field(default_factory=dict)  # a part of the model that did not build -> why
    # a tower the built class leaves out, built alone from its sub-config (name -> module; `towers` calls it)
    detached: dict[str, nn.Module] = field(default_factory=dict)
