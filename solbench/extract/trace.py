"""Instantiate a model's transformers definition on meta tensors and find its distinct layer kinds.

Nothing here allocates real memory: a 671B model is built in about a second. Decoder layers are
deduplicated by structure (module classes, parameter shapes, attention window), so a 36-layer dense
model yields one kind and DeepSeek-V3 yields two (dense and MoE).
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from solbench.extract.configs import ModelConfig
from solbench.spec.errors import SpecError

ENCODER_MODEL_TYPES = frozenset({"vit"})


@dataclass
class LayerKind:
    """One structurally distinct layer: its first index, how many layers share it, and its module."""

    index: int
    count: int
    signature: tuple
    module: nn.Module
    layer_type: str | None = None


@dataclass
class TracedModel:
    config: ModelConfig
    hf_config: Any
    model: nn.Module
    layers: nn.ModuleList
    kinds: list[LayerKind] = field(default_factory=list)

    @property
    def is_encoder(self) -> bool:
        return self.config.model_type in ENCODER_MODEL_TYPES

    def embedding(self) -> nn.Module | None:
        return self.model.get_input_embeddings()

    def lm_head(self) -> nn.Module | None:
        return None if self.is_encoder else self.model.get_output_embeddings()


def hf_config(config: ModelConfig, **overrides: Any):
    """A transformers config object built offline from the facts (plus overrides)."""
    from transformers import AutoConfig

    facts = {k: v for k, v in config.facts.items() if k != "model_type"}
    facts.update(overrides)
    with _quiet():
        cfg = AutoConfig.for_model(config.model_type, **facts)
    return cfg


def instantiate(cfg, encoder: bool, device: str | torch.device = "meta", dtype=torch.bfloat16) -> nn.Module:
    """The model for `cfg` on `device`; sdpa attention where the model allows it, else eager."""
    from transformers import AutoModel, AutoModelForCausalLM

    cls = AutoModel if encoder else AutoModelForCausalLM
    kwargs = {"add_pooling_layer": False} if encoder else {}
    with _quiet(), torch.device(device):
        for attn in ("sdpa", "eager"):
            try:
                return cls.from_config(copy.deepcopy(cfg), dtype=dtype, attn_implementation=attn, **kwargs)
            except ValueError:
                if attn == "eager":
                    raise
    raise AssertionError("unreachable")


def trace(config: ModelConfig) -> TracedModel:
    """Build the model on meta and group its layers into structural kinds."""
    cfg = hf_config(config)
    try:
        model = instantiate(cfg, config.model_type in ENCODER_MODEL_TYPES)
    except (ValueError, KeyError) as exc:
        raise SpecError(f"{config.model_id}: transformers cannot build model_type "
                        f"{config.model_type!r}: {exc}") from None
    layers = find_layers(model, cfg.num_hidden_layers)
    traced = TracedModel(config, cfg, model, layers)
    by_signature: dict[tuple, LayerKind] = {}
    for index, layer in enumerate(layers):
        signature = layer_signature(layer)
        kind = by_signature.get(signature)
        if kind is None:
            layer_types = getattr(cfg, "layer_types", None)
            layer_type = layer_types[index] if layer_types else None
            by_signature[signature] = LayerKind(index, 1, signature, layer, layer_type)
        else:
            kind.count += 1
    traced.kinds = list(by_signature.values())
    return traced


def find_layers(model: nn.Module, count: int) -> nn.ModuleList:
    """The model's stack of blocks: the first ModuleList holding `count` modules."""
    for _, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == count:
            return module
    raise SpecError(f"cannot find a stack of {count} layers in {type(model).__name__}")


def layer_signature(layer: nn.Module) -> tuple:
    """What makes two layers compute differently: classes, parameter shapes, attention window."""
    parts: list = []
    for name, module in layer.named_modules():
        window = getattr(module, "sliding_window", None)
        parts.append((name, type(module).__name__, window if isinstance(window, int) else None))
    for name, param in layer.named_parameters():
        parts.append((name, tuple(param.shape), str(param.dtype)))
    return tuple(parts)


def parameter_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@contextlib.contextmanager
def _quiet():
    """transformers logs warnings about meta devices and defaults; they are noise here."""
    logger = logging.getLogger("transformers")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        logger.setLevel(level)
