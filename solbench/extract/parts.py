"""A composite model one of whose towers needs a library this machine lacks: the parts that build.

Gemma 3n's vision tower is a timm model; without timm, transformers refuses the whole model, and its text
decoder (AltUp, LAuReL, KV-shared attention, sparse MLP) and audio encoder, which need nothing more, were
never seen. Each sub-config is built alone instead; the parts that build sit under the composite's own
names (`language_model`, `audio_tower`), the call is the language model's, and every part that does not
build is named with the reason (`BuiltModel.unbuilt`), never dropped silently.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from solbench.spec.errors import SpecError, first_line

# a sub-config's key -> the name its tower has in transformers' composite models
TOWER_NAMES = {"vision_config": "vision_tower", "audio_config": "audio_tower"}


class Parts(nn.Module):
    """The parts of a composite model that built; calling it calls the language model."""

    def __init__(self, language_model: nn.Module, towers: dict[str, nn.Module]):
        super().__init__()
        self.language_model = language_model
        for name, tower in towers.items():
            self.add_module(name, tower)
        self.main_input_name = language_model.main_input_name
        self.config = language_model.config

    @property
    def dtype(self) -> torch.dtype:
        return self.language_model.dtype

    def forward(self, *args, **kwargs):
        return self.language_model(*args, **kwargs)


def missing_library(exc: BaseException) -> bool:
    """Whether building failed for want of an optional library (transformers' `requires_backends`)."""
    return isinstance(exc, ImportError) or "requires the" in str(exc) and "library" in str(exc)


def build_parts(cfg: Any, model_id: str, why: BaseException, instantiate: Callable[..., nn.Module],
                dtype: torch.dtype = torch.bfloat16) -> tuple[nn.Module, dict[str, str]]:
    """`Parts` of the composite `cfg` (each part built by `instantiate(config, model_id, dtype)`), and each
    part that did not build -> why; re-raises `why` when the language model itself does not build
    (nothing would be left to call)."""
    sub = getattr(cfg, "sub_configs", None) or {}
    if "text_config" not in sub or getattr(cfg, "text_config", None) is None:
        raise why
    try:
        language_model = instantiate(cfg.text_config, model_id, dtype)
    except (SpecError, ImportError):
        raise why from None
    towers, unbuilt = {}, {}
    for key in sub:
        if key == "text_config" or getattr(cfg, key, None) is None:
            continue
        name = TOWER_NAMES.get(key, key.removesuffix("_config"))
        try:
            towers[name] = instantiate(getattr(cfg, key), model_id, dtype)
        except Exception as exc:  # noqa: BLE001 - a part that does not build is reported, the rest extracted
            unbuilt[name] = f"{type(getattr(cfg, key)).__name__} not built: {first_line(exc)}"
    return Parts(language_model, towers), unbuilt
