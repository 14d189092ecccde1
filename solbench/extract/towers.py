"""Encoders a text-only call never reaches: a VL model's vision tower, a speech model's audio encoder.

A VL or speech-LM model is called by the generic capture with token ids alone (`build._tokens`), so its
vision tower or audio encoder never runs and none of its blocks would be seen. Each such encoder becomes
a `BuiltModel` of its own, called with what it takes (pixels, mel frames, stacked audio features), sized
from its own config. Its `root` is its path in the model, so reports name the model's own paths.

An encoder whose call needs its inputs' values (Qwen-VL's `grid_thw`, Qwen-Omni's `feature_lens`: sizes
read from data, which fake tensors do not have) is not called, and stays reported as never called.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from solbench.extract.build import IMAGES_CAPTURE, IMAGES_WORKLOADS, RECIPES
from solbench.extract.built import BuiltModel

# where encoders sit in a transformers model (attribute names, at the top or under `model.`)
ENCODER_NAMES = ("vision_tower", "vision_model", "audio_tower", "audio_encoder", "encoder")
AUDIO_CAPTURE = {"batch_size": (2, 3, 2)}
AUDIO_WORKLOADS = {"batch_size": (1, 8, 32)}
FRAMES_CAPTURE = {"batch_size": (2, 3, 2), "seq_len": (16, 24, 40)}
FRAMES_WORKLOADS = {"batch_size": (1, 8), "seq_len": (500, 1500, 3000)}  # 10, 30 and 60 s at 50 frames a second

Recipe = tuple[Callable, dict[str, tuple[int, ...]], dict[str, tuple[int, ...]]]


def encoders(built: BuiltModel) -> list[BuiltModel]:
    """Every encoder of `built` that its own call does not reach, each with a recipe to call it."""
    main_input = getattr(built.module, "main_input_name", "")
    found = []
    for path, module in [*built.module.named_modules(), *built.detached.items()]:
        if path.rpartition(".")[0] not in ("", "model") or path.rpartition(".")[2] not in ENCODER_NAMES:
            continue
        first = _first_input(module)
        if not first or first == main_input:
            continue  # Whisper's encoder takes the model's own input: the model's call reaches it
        recipe = _recipe(first, getattr(module, "config", None))
        if recipe is not None:
            make_call, capture_axes, workload_axes = recipe
            found.append(dataclasses.replace(built, module=module, make_call=make_call, capture_axes=capture_axes,
                                             workload_axes=workload_axes, root=path))
    return found


def _first_input(module: nn.Module) -> str:
    try:
        names = [p for p in inspect.signature(module.forward).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return ""
    return names[0].name if names else ""


def _recipe(first: str, config: Any) -> Recipe | None:
    """How to call an encoder whose forward takes `first`, from its config; None when this build has none
    (or its call reads sizes from its inputs' values)."""
    if config is None:
        return None
    if first == "pixel_values" and hasattr(config, "image_size") and hasattr(config, "max_num_tiles"):
        return _tiles(config)
    if first == "pixel_values" and hasattr(config, "image_size"):
        return RECIPES["pixel_values"](config, None)  # a ViT's own recipe, from the tower's config
    if first == "input_features" and hasattr(config, "num_mel_bins") and hasattr(config, "max_source_positions"):
        return _mel_frames(config)
    if first == "hidden_states" and hasattr(config, "input_dim") and hasattr(config, "context_size"):
        return _stacked_frames(config)
    if first == "audio_mel" and hasattr(config, "input_feat_size"):
        return _masked_mel(config)
    return None


def _tiles(config) -> Recipe:
    """Llama 3.2 Vision's tower: one image per sample cut into its most tiles, each tile's aspect-ratio id
    (the last supported ratio: every tile real) and tile mask; sizes are read from shapes only."""
    tiles, size, ratio_id = config.max_num_tiles, config.image_size, len(config.supported_aspect_ratios)

    def make_call(axes: dict[str, int], dtype: torch.dtype):
        batch = axes["batch_size"]
        return (), {"pixel_values": torch.randn(batch, 1, tiles, config.num_channels, size, size, dtype=dtype),
                    "aspect_ratio_ids": torch.full((batch, 1), ratio_id, dtype=torch.long),
                    "aspect_ratio_mask": torch.ones(batch, 1, tiles, dtype=torch.long)}
    return make_call, dict(IMAGES_CAPTURE), dict(IMAGES_WORKLOADS)


def _mel_frames(config) -> Recipe:
    """Whisper-style encoders (Voxtral's audio tower): a fixed window of mel frames, two per position."""
    frames = 2 * config.max_source_positions

    def make_call(axes: dict[str, int], dtype: torch.dtype):
        return (), {"input_features": torch.randn(axes["batch_size"], config.num_mel_bins, frames, dtype=dtype)}
    return make_call, dict(AUDIO_CAPTURE), dict(AUDIO_WORKLOADS)


def _stacked_frames(config) -> Recipe:
    """Conformer encoders fed stacked log-mel features (granite-speech): any number of frames."""

    def make_call(axes: dict[str, int], dtype: torch.dtype):
        return (), {"hidden_states": torch.randn(axes["batch_size"], axes["seq_len"], config.input_dim, dtype=dtype)}
    return make_call, dict(FRAMES_CAPTURE), dict(FRAMES_WORKLOADS)


def _masked_mel(config) -> Recipe:
    """Gemma 3n's USM conformer: log-mel frames with a padding mask (True = padded; none padded here)."""

    def make_call(axes: dict[str, int], dtype: torch.dtype):
        batch, frames = axes["batch_size"], axes["seq_len"]
        return (), {"audio_mel": torch.randn(batch, frames, config.input_feat_size, dtype=dtype),
                    "audio_mel_mask": torch.zeros(batch, frames, dtype=torch.bool)}
    return make_call, dict(FRAMES_CAPTURE), dict(FRAMES_WORKLOADS)
