"""Recipes for the FLUX-style MMDiTs that take packed latent tokens plus position ids: FLUX.1 (dev, Fill,
Kontext), FLUX.2 and Bria FIBO.

Their pipelines pack the VAE latent 2x2 into tokens, so the image sequence is (latent_height/2) *
(latent_width/2) tokens of `in_channels` features; Kontext appends a reference image's tokens (ids frame 1).
FLUX.1 and FLUX.2 take sigma in [0, 1] and scale it by 1000 themselves; FIBO takes the scheduler's timestep.
"""

from __future__ import annotations

import torch
from torch import nn

from solbench.extract.build_diffusers.calls import (
    BATCH_CAPTURE,
    BATCH_WORKLOAD,
    TEXT_CAPTURE,
    ComponentCall,
    grid_ids,
    latent_sizes,
    noise,
    spatial_capture,
    text_ids,
    timesteps,
)

PACK = 2  # the pipelines' 2x2 packing of latents into tokens
IMAGE_PIXELS = (512, 768, 1024)  # square sides; FLUX pipelines default to 1024
VAE_FACTOR = 8


def _axes(text_workload: tuple[int, ...]) -> tuple[dict, dict]:
    capture = {"batch_size": BATCH_CAPTURE, **spatial_capture(PACK), "text_len": TEXT_CAPTURE}
    workload = {"batch_size": BATCH_WORKLOAD, "latent_height": latent_sizes(IMAGE_PIXELS, VAE_FACTOR),
                "latent_width": latent_sizes(IMAGE_PIXELS, VAE_FACTOR), "text_len": text_workload}
    return capture, workload


def _image_tokens(axes: dict[str, int], n_axes: int, reference_images: int) -> tuple[int, torch.Tensor]:
    """Token count and position ids of the image and its reference images (frames 1..n), one grid each."""
    rows, cols = axes["latent_height"] // PACK, axes["latent_width"] // PACK
    ids = torch.cat([grid_ids(rows, cols, n_axes, frame) for frame in range(reference_images + 1)])
    return rows * cols * (reference_images + 1), ids


def flux_recipe(module: nn.Module, model_id: str) -> list[ComponentCall]:
    """FluxTransformer2DModel: T5 text states, CLIP pooled vector, guidance scale when guidance-distilled."""
    cfg = module.config
    n_axes = len(cfg.axes_dims_rope)
    reference_images = 1 if "kontext" in model_id.lower() else 0

    def make_call(axes: dict[str, int], dtype: torch.dtype):
        batch, text = axes["batch_size"], axes["text_len"]
        tokens, img_ids = _image_tokens(axes, n_axes, reference_images)
        kwargs = {
            "hidden_states": noise(batch, tokens, cfg.in_channels, dtype=dtype),
            "encoder_hidden_states": noise(batch, text, cfg.joint_attention_dim, dtype=dtype),
            "pooled_projections": noise(batch, cfg.pooled_projection_dim, dtype=dtype),
            "timestep": timesteps(batch, 1.0, dtype),
            "img_ids": img_ids,
            "txt_ids": text_ids(text, n_axes),
            "guidance": torch.full((batch,), 3.5) if cfg.guidance_embeds else None,
            "return_dict": False,
        }
        return (), kwargs

    capture, workload = _axes((512,))
    return [ComponentCall("", module, make_call, capture, workload)]


def flux2_recipe(module: nn.Module, model_id: str) -> list[ComponentCall]:
    """Flux2Transformer2DModel: stacked Mistral hidden states as text, 4-axis rope ids, no pooled vector."""
    cfg = module.config
    n_axes = len(cfg.axes_dims_rope)

    def make_call(axes: dict[str, int], dtype: torch.dtype):
        batch, text = axes["batch_size"], axes["text_len"]
        tokens, img_ids = _image_tokens(axes, n_axes, 0)
        kwargs = {
            "hidden_states": noise(batch, tokens, cfg.in_channels, dtype=dtype),
            "encoder_hidden_states": noise(batch, text, cfg.joint_attention_dim, dtype=dtype),
            "timestep": timesteps(batch, 1.0, dtype),
            "img_ids": img_ids,
            "txt_ids": text_ids(text, n_axes),
            "guidance": torch.full((batch,), 4.0) if cfg.guidance_embeds else None,
            "return_dict": False,
        }
        return (), kwargs

    capture, workload = _axes((512,))
    return [ComponentCall("", module, make_call, capture, workload)]


def fibo_recipe(module: nn.Module, model_id: str) -> list[ComponentCall]:
    """BriaFiboTransformer2DModel: the text encoder's last two layers as text states, and one projected
    text-encoder layer per block (`text_encoder_layers`, double blocks then single blocks)."""
    cfg = module.config
    n_axes = len(cfg.axes_dims_rope)
    n_layers = cfg.num_layers + cfg.num_single_layers

    def make_call(axes: dict[str, int], dtype: torch.dtype):
        batch, text = axes["batch_size"], axes["text_len"]
        tokens, img_ids = _image_tokens(axes, n_axes, 0)
        kwargs = {
            "hidden_states": noise(batch, tokens, cfg.in_channels, dtype=dtype),
            "encoder_hidden_states": noise(batch, text, cfg.joint_attention_dim, dtype=dtype),
            "text_encoder_layers": [noise(batch, text, cfg.text_encoder_dim, dtype=dtype) for _ in range(n_layers)],
            "timestep": timesteps(batch, 1000.0, dtype),
            "img_ids": img_ids,
            "txt_ids": text_ids(text, n_axes),
            "guidance": torch.full((batch,), 5.0) if cfg.guidance_embeds else None,
            "return_dict": False,
        }
        return (), kwargs

    capture, workload = _axes((512, 2048))
    return [ComponentCall("", module, make_call, capture, workload)]
