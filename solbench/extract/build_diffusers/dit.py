"""Recipes for DiTs that patch the latent themselves (SD3, Sana, HunyuanImage-2.1, Wan) or take packed
tokens with their grid shapes as Python ints (Qwen-Image).

Text lengths are what each pipeline feeds: SD3 77 CLIP + 256 T5 tokens, Sana 300 Gemma tokens, Wan 512 umT5
tokens, HunyuanImage a Qwen2.5-VL prompt padded to 1000; Qwen-Image prompts are not padded (its pipeline
drops an all-ones mask), so they span short to long.
"""

from __future__ import annotations

import torch
from torch import nn

from solbench.extract.build_diffusers.calls import (
    BATCH_CAPTURE,
    BATCH_WORKLOAD,
    FRAMES_CAPTURE,
    TEXT_CAPTURE,
    ComponentCall,
    latent_sizes,
    noise,
    spatial_capture,
    timesteps,
)


def _image_axes(patch: int, pixels: tuple[int, ...], vae_factor: int,
                text_workload: tuple[int, ...]) -> tuple[dict, dict]:
    capture = {"batch_size": BATCH_CAPTURE, **spatial_capture(patch), "text_len": TEXT_CAPTURE}
    workload = {"batch_size": BATCH_WORKLOAD, "latent_height": latent_sizes(pixels, vae_factor),
                "latent_width": latent_sizes(pixels, vae_factor), "text_len": text_workload}
    return capture, workload


def _latents(axes: dict[str, int], channels: int, dtype: torch.dtype) -> torch.Tensor:
    return noise(axes["batch_size"], channels, axes["latent_height"], axes["latent_width"], dtype=dtype)


def sd3_recipe(module: nn.Module, model_id: str) -> list[ComponentCall]:
    """SD3Transformer2DModel: CLIP+T5 text states, the two CLIPs' pooled vectors, timestep in [0, 1000)."""
    cfg = module.config

    def make_call(axes: dict[str, int], dtype: torch.dtype):
        batch = axes["batch_size"]
        return (), {"hidden_states": _latents(axes, cfg.in_channels, dtype),
                    "encoder_hidden_states": noise(batch, axes["text_len"], cfg.joint_attention_dim, dtype=dtype),
                    "pooled_projections": noise(batch, cfg.pooled_projection_dim, dtype=dtype),
                    "timestep": timesteps(batch, 1000.0), "return_dict": False}

    capture, workload = _image_axes(cfg.patch_size, (512, 1024), 8, (333,))
    return [ComponentCall("", module, make_call, capture, workload)]


def sana_recipe(module: nn.Module, model_id: str) -> list[ComponentCall]:
    """SanaTransformer2DModel on DC-AE latents (32x downsampling); a guidance scale when guidance-distilled
    (Sana-Sprint)."""
    cfg = module.config

    def make_call(axes: dict[str, int], dtype: torch.dtype):
        batch = axes["batch_size"]
        return (), {"hidden_states": _latents(axes, cfg.in_channels, dtype),
                    "encoder_hidden_states": noise(batch, axes["text_len"], cfg.caption_channels, dtype=dtype),
                    "timestep": timesteps(batch, 1000.0),
                    "guidance": torch.full((batch,), 4.5) if cfg.guidance_embeds else None,
                    "return_dict": False}

    capture, workload = _image_axes(cfg.patch_size, (512, 1024, 2048), 32, (300,))
    return [ComponentCall("", module, make_call, capture, workload)]


def hunyuan_image_recipe(module: nn.Module, model_id: str) -> list[ComponentCall]:
    """HunyuanImageTransformer2DModel on its 32x VAE's latents, with the padded prompt's mask. The glyph
    (ByT5) stream is left out: merging it selects tokens by mask values, which no shape-level capture can
    follow."""
    cfg = module.config
    patch = cfg.patch_size[0] if isinstance(cfg.patch_size, (list, tuple)) else cfg.patch_size

    def make_call(axes: dict[str, int], dtype: torch.dtype):
        batch, text = axes["batch_size"], axes["text_len"]
        return (), {"hidden_states": _latents(axes, cfg.in_channels, dtype),
                    "timestep": timesteps(batch, 1000.0, dtype),
                    "encoder_hidden_states": noise(batch, text, cfg.text_embed_dim, dtype=dtype),
                    "encoder_attention_mask": torch.ones(batch, text, dtype=torch.int64),
                    "guidance": torch.full((batch,), 3500.0) if cfg.guidance_embeds else None,
                    "return_dict": False}

    capture, workload = _image_axes(patch, (1024, 2048), 32, (1000,))
    return [ComponentCall("", module, make_call, capture, workload)]


def qwen_image_recipe(module: nn.Module, model_id: str) -> list[ComponentCall]:
    """QwenImageTransformer2DModel: 2x2-packed latent tokens and their (frame, rows, cols) grids as ints; the
    Edit models append the input image's tokens as a second grid."""
    cfg = module.config
    grids = 2 if "edit" in model_id.lower() else 1

    def make_call(axes: dict[str, int], dtype: torch.dtype):
        batch = axes["batch_size"]
        rows, cols = axes["latent_height"] // 2, axes["latent_width"] // 2
        return (), {"hidden_states": noise(batch, rows * cols * grids, cfg.in_channels, dtype=dtype),
                    "encoder_hidden_states": noise(batch, axes["text_len"], cfg.joint_attention_dim, dtype=dtype),
                    "timestep": timesteps(batch, 1.0, dtype),
                    "img_shapes": [[(1, rows, cols)] * grids for _ in range(batch)],
                    "guidance": torch.full((batch,), 1.0) if cfg.guidance_embeds else None,
                    "return_dict": False}

    capture, workload = _image_axes(2, (512, 1024, 1328), 8, (128, 512))
    return [ComponentCall("", module, make_call, capture, workload)]


def wan_recipe(module: nn.Module, model_id: str) -> list[ComponentCall]:
    """WanTransformer3DModel on video latents (B, C, frames, H, W): 81 frames are 21 latent frames, 480p and
    720p are 60x104 and 90x160 latents."""
    cfg = module.config
    p_t, p_h, _ = cfg.patch_size

    def make_call(axes: dict[str, int], dtype: torch.dtype):
        batch = axes["batch_size"]
        latents = noise(batch, cfg.in_channels, axes["latent_frames"], axes["latent_height"],
                        axes["latent_width"], dtype=dtype)
        return (), {"hidden_states": latents, "timestep": timesteps(batch, 1000.0),
                    "encoder_hidden_states": noise(batch, axes["text_len"], cfg.text_dim, dtype=dtype),
                    "return_dict": False}

    capture = {"batch_size": BATCH_CAPTURE, "latent_frames": tuple(p_t * f for f in FRAMES_CAPTURE),
               **spatial_capture(p_h), "text_len": TEXT_CAPTURE}
    workload = {"batch_size": BATCH_WORKLOAD, "latent_frames": (21,), "latent_height": (60, 90),
                "latent_width": (104, 160), "text_len": (512,)}
    return [ComponentCall("", module, make_call, capture, workload)]
