"""Recipe for UNet2DConditionModel (Stable Diffusion 1.x/2.x, SDXL base and refiner).

SDXL's UNet also takes `added_cond_kwargs`: the pooled CLIP-G text vector (1280 wide in both SDXL models) and
the micro-conditioning time ids, 6 for the base model (original size, crop, target size) and 5 for the
refiner (original size, crop, aesthetic score); `projection_class_embeddings_input_dim` = 1280 + ids * 256.
"""

from __future__ import annotations

import torch
from torch import nn

from solbench.extract.build_diffusers.calls import (
    BATCH_CAPTURE,
    BATCH_WORKLOAD,
    TEXT_CAPTURE,
    ComponentCall,
    noise,
    spatial_capture,
    timesteps,
)
from solbench.extract.build_diffusers.meta_module import DiffusersBuildError

CLIP_TEXT_LEN = 77
SDXL_POOLED_WIDTH = 1280


def _time_id_count(projection_dim: int, time_embed_dim: int) -> int:
    """How many micro-conditioning ids a text_time UNet takes, given its pooled vector is 1280 wide."""
    for count in (6, 5):
        if projection_dim - count * time_embed_dim == SDXL_POOLED_WIDTH:
            return count
    raise DiffusersBuildError(f"projection_class_embeddings_input_dim {projection_dim} is not {SDXL_POOLED_WIDTH} "
                     f"+ 5 or 6 time ids x {time_embed_dim}: no SDXL-style call known for it")


def _added_cond(cfg) -> tuple[int, int] | None:
    """(pooled width, time id count) for `text_time` conditioning, None when the UNet takes none."""
    if cfg.addition_embed_type is None:
        return None
    if cfg.addition_embed_type != "text_time":
        raise DiffusersBuildError(f"UNet addition_embed_type {cfg.addition_embed_type!r}: only 'text_time' (SDXL) "
                         "has a call recipe")
    count = _time_id_count(cfg.projection_class_embeddings_input_dim, cfg.addition_time_embed_dim)
    return SDXL_POOLED_WIDTH, count


def unet_recipe(module: nn.Module, model_id: str) -> list[ComponentCall]:
    """Latents (B, 4, H, W) with H and W multiples of the UNet's total downsampling, CLIP text states."""
    cfg = module.config
    added = _added_cond(cfg)
    if cfg.class_embed_type is not None:
        raise DiffusersBuildError(f"UNet class_embed_type {cfg.class_embed_type!r} has no call recipe")
    cross_width = cfg.cross_attention_dim
    if isinstance(cross_width, (list, tuple)):
        cross_width = cross_width[0]
    factor = 2 ** (len(cfg.block_out_channels) - 1)

    def make_call(axes: dict[str, int], dtype: torch.dtype):
        batch = axes["batch_size"]
        kwargs = {"sample": noise(batch, cfg.in_channels, axes["latent_height"], axes["latent_width"], dtype=dtype),
                  "timestep": timesteps(batch, 1000.0),
                  "encoder_hidden_states": noise(batch, axes["text_len"], cross_width, dtype=dtype),
                  "return_dict": False}
        if added is not None:
            pooled, ids = added
            kwargs["added_cond_kwargs"] = {"text_embeds": noise(batch, pooled, dtype=dtype),
                                           "time_ids": torch.full((batch, ids), 1024.0, dtype=dtype)}
        return (), kwargs

    native = cfg.sample_size if isinstance(cfg.sample_size, int) else 64
    capture = {"batch_size": BATCH_CAPTURE, **spatial_capture(factor), "text_len": TEXT_CAPTURE}
    workload = {"batch_size": BATCH_WORKLOAD, "latent_height": (native * 3 // 4, native),
                "latent_width": (native * 3 // 4, native), "text_len": (CLIP_TEXT_LEN,)}
    return [ComponentCall("", module, make_call, capture, workload)]
