"""Recipes for VAEs: each is two models, `decode` (latents to pixels, every pipeline's last step) and
`encode` (pixels to latents: img2img, editing, Fill/Kontext references, training).

Each path is a thin wrapper module whose forward is the VAE's own `decode` / `encode` (parameters stay under
the `vae.` prefix). `encode` returns the latent distribution's mode (its mean), as the edit pipelines' "argmax"
retrieval does; DC-AE's encoder is deterministic and returns its latent.
"""

from __future__ import annotations

import torch
from torch import nn

from solbench.extract.build_diffusers.calls import (
    BATCH_CAPTURE,
    BATCH_WORKLOAD,
    ComponentCall,
    latent_sizes,
    noise,
    spatial_capture,
)

# Wan's VAE runs its decoder once per latent frame, so the frame count is unrolled into the graph and the
# blocks around that loop are validated at the traced size: it is the smallest here (2 latent frames).
VIDEO_FRAMES_CAPTURE = (5, 9, 13)  # 1 + 4k frames: 2, 3 and 4 latent frames
LATENT_FRAMES_CAPTURE = (2, 3, 4)
VIDEO_FRAMES_WORKLOAD = (81,)  # Wan's default clip: 21 latent frames


class VaeDecode(nn.Module):
    """The VAE's decode path as a module: latents in, pixels out."""

    def __init__(self, vae: nn.Module):
        super().__init__()
        self.vae = vae

    def forward(self, latents: torch.Tensor) -> torch.Tensor:
        return self.vae.decode(latents, return_dict=False)[0]


class VaeEncode(nn.Module):
    """The VAE's encode path as a module: pixels in, the latent (the posterior's mode) out."""

    def __init__(self, vae: nn.Module):
        super().__init__()
        self.vae = vae

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        encoded = self.vae.encode(images, return_dict=False)[0]
        return encoded if isinstance(encoded, torch.Tensor) else encoded.mode()


def _image_vae(module: nn.Module, latent_channels: int, factor: int, native_px: int,
               frame_axis: bool = False) -> list[ComponentCall]:
    """An image VAE with `factor`x spatial downsampling; `frame_axis` for the Wan-family video VAEs used on
    single images (a frame axis of 1)."""
    in_channels = module.config.get("in_channels", module.config.get("input_channels", 3))
    frame = (1,) if frame_axis else ()

    def decode_call(axes: dict[str, int], dtype: torch.dtype):
        return (noise(axes["batch_size"], latent_channels, *frame, axes["latent_height"], axes["latent_width"],
                      dtype=dtype),), {}

    def encode_call(axes: dict[str, int], dtype: torch.dtype):
        return (noise(axes["batch_size"], in_channels, *frame, axes["image_height"], axes["image_width"],
                      dtype=dtype),), {}

    pixels = (native_px // 2, native_px)
    latent_capture = {"batch_size": BATCH_CAPTURE, **spatial_capture(1)}
    image_capture = {"batch_size": BATCH_CAPTURE, **{k.replace("latent", "image"): v
                                                     for k, v in spatial_capture(factor).items()}}
    return [
        ComponentCall("decode", VaeDecode(module).eval(), decode_call, latent_capture,
                      {"batch_size": BATCH_WORKLOAD, "latent_height": latent_sizes(pixels, factor),
                       "latent_width": latent_sizes(pixels, factor)}),
        ComponentCall("encode", VaeEncode(module).eval(), encode_call, image_capture,
                      {"batch_size": BATCH_WORKLOAD, "image_height": pixels, "image_width": pixels}),
    ]


def _downsampling(block_out_channels) -> int:
    return 2 ** (len(block_out_channels) - 1)


def autoencoder_kl_recipe(module: nn.Module, model_id: str) -> list[ComponentCall]:
    """AutoencoderKL (SD 1.x, SDXL, SD3, FLUX.1) and AutoencoderKLFlux2: 8x, native size `sample_size`."""
    cfg = module.config
    native = cfg.sample_size if isinstance(cfg.sample_size, int) else 1024
    return _image_vae(module, cfg.latent_channels, _downsampling(cfg.block_out_channels), native)


def autoencoder_dc_recipe(module: nn.Module, model_id: str) -> list[ComponentCall]:
    """AutoencoderDC (Sana's DC-AE): 32x downsampling by pixel (un)shuffle, 1024 px native."""
    cfg = module.config
    return _image_vae(module, cfg.latent_channels, _downsampling(cfg.encoder_block_out_channels), 1024)


def hunyuan_image_vae_recipe(module: nn.Module, model_id: str) -> list[ComponentCall]:
    """AutoencoderKLHunyuanImage: `spatial_compression_ratio`x (32 for HunyuanImage-2.1)."""
    cfg = module.config
    return _image_vae(module, cfg.latent_channels, cfg.spatial_compression_ratio, cfg.sample_size)


def qwen_image_vae_recipe(module: nn.Module, model_id: str) -> list[ComponentCall]:
    """AutoencoderKLQwenImage: Wan's causal 3D VAE used on single frames (B, C, 1, H, W)."""
    cfg = module.config
    return _image_vae(module, cfg.z_dim, 2 ** len(cfg.temperal_downsample), 1024, frame_axis=True)


def wan_vae_recipe(module: nn.Module, model_id: str) -> list[ComponentCall]:
    """AutoencoderKLWan on video: 1 + 4k frames encode to 1 + k latent frames (decoded frame by frame with a
    causal cache, so the frame counts unroll into the graph); 8x spatially."""
    cfg = module.config
    factor = cfg.scale_factor_spatial or 8
    temporal = cfg.scale_factor_temporal or 4

    def decode_call(axes: dict[str, int], dtype: torch.dtype):
        return (noise(axes["batch_size"], cfg.z_dim, axes["latent_frames"], axes["latent_height"],
                      axes["latent_width"], dtype=dtype),), {}

    def encode_call(axes: dict[str, int], dtype: torch.dtype):
        return (noise(axes["batch_size"], cfg.in_channels, axes["video_frames"], axes["image_height"],
                      axes["image_width"], dtype=dtype),), {}

    image_capture = {k.replace("latent", "image"): v for k, v in spatial_capture(factor).items()}
    decode_workload = {"batch_size": (1,), "latent_frames": (1 + (VIDEO_FRAMES_WORKLOAD[0] - 1) // temporal,),
                       "latent_height": (60, 90), "latent_width": (104, 160)}
    encode_workload = {"batch_size": (1,), "video_frames": VIDEO_FRAMES_WORKLOAD, "image_height": (480, 720),
                       "image_width": (832, 1280)}
    return [
        ComponentCall("decode", VaeDecode(module).eval(), decode_call,
                      {"batch_size": BATCH_CAPTURE, "latent_frames": LATENT_FRAMES_CAPTURE, **spatial_capture(1)},
                      decode_workload),
        ComponentCall("encode", VaeEncode(module).eval(), encode_call,
                      {"batch_size": BATCH_CAPTURE, "video_frames": VIDEO_FRAMES_CAPTURE, **image_capture},
                      encode_workload),
    ]


VAE_RECIPES = {
    "AutoencoderKL": autoencoder_kl_recipe,
    "AutoencoderKLFlux2": autoencoder_kl_recipe,
    "AutoencoderDC": autoencoder_dc_recipe,
    "AutoencoderKLHunyuanImage": hunyuan_image_vae_recipe,
    "AutoencoderKLQwenImage": qwen_image_vae_recipe,
    "AutoencoderKLWan": wan_vae_recipe,
}
