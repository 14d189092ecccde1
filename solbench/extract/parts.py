"""A composite model one of whose towers needs a library this machine lacks: the parts that build.

Gemma 3n's vision tower is a timm model; without timm, transformers refuses the whole model, and its text
decoder (AltUp, LAuReL, KV-shared attention, sparse MLP) and audio encoder, which need nothing more, were
never seen. Each sub-config is built alone instead; the parts that build sit under the composite's own
names (`language_model`, `audio_tower`), the call is the language model's, and every part that does not
build is named with the reason (`BuiltModel.unbuilt`), never dropped silently.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from solbench.extract import known
from solbench.extract.capture import quiet
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


def left_out_towers(cfg: Any, model: nn.Module, model_id: str, instantiate: Callable[..., nn.Module],
                    dtype: torch.dtype = torch.bfloat16) -> tuple[dict[str, nn.Module], dict[str, str]]:
    """Vision and audio towers of the composite `cfg` that the class built for it leaves out, each built
    alone (Llama 3.2 Vision's causal LM is its text decoder: its vision model is only seen so), and each that
    did not build -> why. A tower whose config some module of `model` already has is not built again."""
    sub = getattr(cfg, "sub_configs", None) or {}
    held = {type(getattr(m, "config", None)) for m in model.modules()}
    towers, unbuilt = {}, {}
    for key in sub:
        tower_cfg = getattr(cfg, key, None)
        if key not in TOWER_NAMES or tower_cfg is None or type(tower_cfg) in held:
            continue
        try:
            towers[TOWER_NAMES[key]] = _built_alone(tower_cfg, model_id, instantiate, dtype)
        except Exception as exc:  # noqa: BLE001 - a tower that does not build is reported, the rest extracted
            unbuilt[TOWER_NAMES[key]] = f"{type(tower_cfg).__name__} not built: {first_line(exc)}"
    return towers, unbuilt


def _built_alone(tower_cfg: Any, model_id: str, instantiate: Callable[..., nn.Module],
                 dtype: torch.dtype) -> nn.Module:
    """The tower by its auto class, else by its own modeling module's class (MllamaVisionConfig has no auto
    class); the first error when neither builds it."""
    try:
        return instantiate(tower_cfg, model_id, dtype)
    except Exception:
        owner = own_class(tower_cfg)
        if owner is None:
            raise
    with quiet(), torch.device("meta"):
        return known.build(lambda: owner._from_config(copy.deepcopy(tower_cfg), dtype=dtype)).eval()


def own_class(cfg: Any) -> type | None:
    """The model class of `cfg`'s own modeling module whose `config_class` it is (a causal LM first, then a
    bare model), for a sub-config no auto mapping names (Mllama's and Qwen3-Omni's text and vision models)."""
    package = type(cfg).__module__.rpartition(".")[0]
    try:
        modeling = importlib.import_module(package + ".modeling_" + package.rpartition(".")[2])
    except ImportError:
        return None
    owners = [c for c in vars(modeling).values() if isinstance(c, type) and issubclass(c, nn.Module)
              and getattr(c, "config_class", None) is type(cfg)]
    owners.sort(key=lambda c: (not c.__name__.endswith("ForCausalLM"), not c.__name__.endswith("Model"), c.__name__))
    return owners[0] if owners else None

