"""A transformers config -> `BuiltModel`: the model on meta tensors and a recipe for calling it.

The recipe follows the model's main input (`main_input_name`), so one small function per kind of
input serves every architecture that takes it: token ids (decoders, MoE, SSM and hybrid models,
encoder-only text models), audio features (Whisper: encoder frames plus decoder tokens), pixels
(ViT, SigLIP, SAM-style encoders). Capture sizes are small and at least 2 (no 0/1 specialisation);
workload sizes are the model's real ones.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch import nn

from solbench.extract import known, parts
from solbench.extract.built import BuiltModel
from solbench.extract.capture import quiet
from solbench.spec.errors import SpecError, first_line

TOKENS_CAPTURE = {"batch_size": (2, 3, 2), "seq_len": (16, 24, 40)}
TOKENS_WORKLOADS = {"batch_size": (1, 8), "seq_len": (128, 1024, 4096)}
# mel frames at 100 a second; captured at sizes an 8x subsampling leaves distinct and >= 2 (8, 12, 20)
MEL_CAPTURE = {"batch_size": (2, 3, 2), "seq_len": (64, 96, 160)}
MEL_WORKLOADS = {"batch_size": (1, 8), "seq_len": (1000, 3000, 6000)}  # 10, 30 and 60 s of audio
IMAGES_CAPTURE = {"batch_size": (4, 2, 3)}  # traced at 4, validated at the cheaper 2 and 3
IMAGES_WORKLOADS = {"batch_size": (1, 8, 32, 128)}


def build_transformers(model_id: str, facts: dict[str, Any], family: str = "") -> BuiltModel:
    """Build the model `facts` describe (a config.json's keys, `model_type` included) on meta."""
    import transformers
    from transformers import AutoConfig

    facts = dict(facts)
    model_type = facts.pop("model_type", None)
    if not model_type:
        raise SpecError(f"{model_id}: its config has no model_type")
    try:
        with quiet():
            cfg = AutoConfig.for_model(model_type, **facts)
    except (ValueError, KeyError, TypeError) as exc:
        raise SpecError(f"{model_id}: transformers cannot read a {model_type!r} config: {exc}") from None
    unbuilt: dict[str, str] = {}
    detached: dict[str, nn.Module] = {}
    try:
        model = instantiate(cfg, model_id)
        detached, unbuilt = parts.left_out_towers(cfg, model, model_id, instantiate)  # Mllama's vision model
    except Exception as exc:
        if not parts.missing_library(exc):
            raise
        model, unbuilt = parts.build_parts(cfg, model_id, exc, instantiate)  # Gemma 3n without timm: text and audio
    recipe = RECIPES.get(model.main_input_name)
    if recipe is None:
        raise SpecError(f"{model_id}: no input recipe for a model whose main input is {model.main_input_name!r}")
    make_call, capture_axes, workload_axes = recipe(cfg, model)
    return BuiltModel(model_id, model, "transformers", make_call, capture_axes, workload_axes,
                      versions={"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0]},
                      family=family, unbuilt=unbuilt, detached=detached)


def instantiate(cfg, model_id: str, dtype: torch.dtype = torch.bfloat16) -> nn.Module:
    """The first auto class that builds the config (causal LM, then the bare model), sdpa where allowed.

    The PyTorch path is pinned: hub kernels (`use_kernels`) are never requested, and models that pick
    a fast path by checking for installed kernels are told not to through `use_mamba_kernels`."""
    from transformers import AutoModel, AutoModelForCausalLM

    if hasattr(cfg, "use_mamba_kernels"):
        cfg.use_mamba_kernels = False
    errors = []
    order = (AutoModel, AutoModelForCausalLM) if getattr(cfg, "is_encoder_decoder", False) else \
        (AutoModelForCausalLM, AutoModel)
    for cls in order:
        for attn in ("sdpa", "eager"):
            try:
                with quiet(), torch.device("meta"):
                    return known.build(partial(cls.from_config, copy.deepcopy(cfg), dtype=dtype,
                                               attn_implementation=attn)).eval()
            except (ValueError, KeyError, TypeError, AttributeError, AssertionError) as exc:
                errors.append(f"{cls.__name__}/{attn}: {first_line(exc)}")  # transformers lists every config class
    raise SpecError(f"{model_id}: transformers cannot build it: {errors[-1]}")


def _tokens(cfg, model) -> tuple[Callable, dict, dict]:
    vocab = getattr(cfg, "vocab_size", None) or getattr(getattr(cfg, "text_config", None), "vocab_size", 32)
    vision = _vision_states(cfg, model)

    def make_call(axes: dict[str, int], dtype: torch.dtype):
        ids = torch.randint(0, vocab, (axes["batch_size"], axes["seq_len"]))
        kwargs: dict[str, Any] = {"input_ids": ids}
        if vision is not None:
            kwargs["cross_attention_states"] = torch.randn(axes["batch_size"], *vision, dtype=dtype)
        if getattr(cfg, "is_encoder_decoder", False):
            kwargs["decoder_input_ids"] = ids
        # no KV cache: a layer handed one writes into it, and export cannot lift that state (a VL model
        # keeps `use_cache` in its text config only: Qwen3-VL's text attention failed to export)
        if hasattr(cfg, "use_cache") or hasattr(getattr(cfg, "text_config", None), "use_cache"):
            kwargs["use_cache"] = False
        return (), kwargs
    return make_call, dict(TOKENS_CAPTURE), dict(TOKENS_WORKLOADS)


def _vision_states(cfg, model) -> tuple[int, int] | None:
    """(tokens, width) of the vision states a text decoder cross-attends to, for a decoder whose forward takes
    them (Llama 3.2 Vision's: without them its cross-attention layers are skipped, never called): as many as
    its vision config makes, tiles x (patches + a class token), at the text width they are projected to."""
    import inspect

    vision = getattr(cfg, "vision_config", None)
    if vision is None or "cross_attention_states" not in inspect.signature(model.forward).parameters:
        return None
    patches = (vision.image_size // vision.patch_size) ** 2 + 1
    text = getattr(cfg, "text_config", cfg)
    return getattr(vision, "max_num_tiles", 1) * patches, text.hidden_size


def _audio_features(cfg, model) -> tuple[Callable, dict, dict]:
    """Whisper-style: a fixed window of mel frames for the encoder, a token sequence for the decoder."""
    if not hasattr(cfg, "max_source_positions"):
        return _mel_sequence(cfg, model)
    frames = 2 * cfg.max_source_positions
    vocab = cfg.vocab_size

    def make_call(axes: dict[str, int], dtype: torch.dtype):
        kwargs: dict[str, Any] = {
            "input_features": torch.randn(axes["batch_size"], cfg.num_mel_bins, frames, dtype=dtype)}
        if getattr(cfg, "is_encoder_decoder", False):
            kwargs["decoder_input_ids"] = torch.randint(0, vocab, (axes["batch_size"], axes["seq_len"]))
            kwargs["use_cache"] = False
        return (), kwargs
    workloads = {"batch_size": (1, 8, 32), "seq_len": (32, 448)}
    return make_call, dict(TOKENS_CAPTURE), workloads


def _mel_sequence(cfg, model) -> tuple[Callable, dict, dict]:
    """Conformer ASR models (Parakeet): any number of mel frames, [batch, frames, mel bins], 100 a second;
    a transducer's prediction network takes one token a step (its joint then scores every frame)."""
    mel_bins = getattr(cfg, "num_mel_bins", None) or cfg.encoder_config.num_mel_bins
    transducer = getattr(cfg, "is_encoder_decoder", False)

    def make_call(axes: dict[str, int], dtype: torch.dtype):
        batch = axes["batch_size"]
        kwargs: dict[str, Any] = {"input_features": torch.randn(batch, axes["seq_len"], mel_bins, dtype=dtype)}
        if transducer:
            kwargs["decoder_input_ids"] = torch.randint(0, cfg.vocab_size, (batch, 1))
        return (), kwargs
    return make_call, dict(MEL_CAPTURE), dict(MEL_WORKLOADS)


def _pixels(cfg, model) -> tuple[Callable, dict, dict]:
    vision = getattr(cfg, "vision_config", cfg)
    size = vision.image_size
    size = tuple(size) if isinstance(size, (list, tuple)) else (size, size)
    channels = getattr(vision, "num_channels", 3)

    def make_call(axes: dict[str, int], dtype: torch.dtype):
        return (), {"pixel_values": torch.randn(axes["batch_size"], channels, *size, dtype=dtype)}
    return make_call, dict(IMAGES_CAPTURE), dict(IMAGES_WORKLOADS)


RECIPES = {"input_ids": _tokens, "input_features": _audio_features, "pixel_values": _pixels}
