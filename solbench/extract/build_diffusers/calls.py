"""What a diffusion recipe hands back for one path through a component, and the axis sizes recipes share.

Axes are model-level and in latent units where the model sees latents: `latent_height`/`latent_width` are
the VAE latent's spatial size (before any patching), `latent_frames` its frame count, `text_len` the text
encoder's sequence length, `image_height`/`image_width` pixels (a VAE encoder's input).

Capture sizes are >= 2, three per axis: the capture traces at the first and validates at the other two.
Tracing runs on fake tensors and costs the same at any size, so the first point is the larger one, chosen
so that no two variable sizes of its call coincide, patched and downsampled sizes included (torch.export
gives equal sizes one symbol, duck sizing, and would tie unrelated axes together). The two validation
points are the smallest sizes that still move every axis: validation runs the module and the reference
on CPU in float32 and bfloat16, and its cost grows with batch x height x width (about 11x less than
validating at the traced sizes' scale), while any size exercises the same code for bit-exactness.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from solbench.extract.built import CallMaker

BATCH_CAPTURE = (4, 2, 3)
BATCH_WORKLOAD = (1, 2)  # one prompt; two with classifier-free guidance run as one batch
TEXT_CAPTURE = (13, 7, 11)
FRAMES_CAPTURE = (5, 2, 3)


@dataclass
class ComponentCall:
    """One way to call a component: its module (the component, or a thin wrapper for a VAE path) and axes."""

    path: str  # "" for the component's forward; "encode" / "decode" for a VAE's two halves
    module: nn.Module
    make_call: CallMaker
    capture_axes: dict[str, tuple[int, ...]]
    workload_axes: dict[str, tuple[int, ...]]


def spatial_capture(factor: int) -> dict[str, tuple[int, ...]]:
    """Latent height/width capture sizes that are multiples of `factor` (patch size or the UNet's downsampling).
    Traced at 6 and 8 patches (a UNet's levels 6f/3f/.. and 8f/4f/..), distinct from each other and from the
    traced batch (4), text (13) and frame (5) sizes; validated at 2x3 and 3x2 patches."""
    return {"latent_height": (6 * factor, 2 * factor, 3 * factor), "latent_width": (8 * factor, 3 * factor, 2 * factor)}


def latent_sizes(pixels: tuple[int, ...], vae_factor: int) -> tuple[int, ...]:
    """Latent sizes of images `pixels` wide under a VAE that downsamples by `vae_factor`."""
    return tuple(p // vae_factor for p in pixels)


def noise(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    """Latents or embeddings: standard normal, on the caller's default device (meta, fake or a real CPU)."""
    return torch.randn(*shape, dtype=dtype)


def timesteps(batch: int, scale: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """One denoising step per sample in [0, scale): fp32 as schedulers hand them over, or `dtype` where the
    pipeline casts them to the latents' dtype first (FLUX, Qwen-Image, FIBO, HunyuanImage)."""
    return (torch.rand(batch, dtype=torch.float32) * scale).to(dtype)


def grid_ids(height: int, width: int, n_axes: int, frame: int = 0) -> torch.Tensor:
    """Position ids (height*width, n_axes) of a token grid, as FLUX-style pipelines build them: axis 0 holds
    `frame` (0 for the image, 1.. for reference images), the next two hold row and column."""
    rows = torch.arange(height, dtype=torch.float32).repeat_interleave(width)
    cols = torch.arange(width, dtype=torch.float32).repeat(height)
    ids = torch.zeros(height * width, n_axes, dtype=torch.float32)
    ids[:, 0] = float(frame)
    ids[:, 1] = rows
    ids[:, 2] = cols
    return ids


def text_ids(length: int, n_axes: int) -> torch.Tensor:
    """Text position ids (length, n_axes): zeros for 3-axis FLUX.1 rope, the token index on the last axis of
    FLUX.2's 4-axis rope."""
    ids = torch.zeros(length, n_axes, dtype=torch.float32)
    if n_axes == 4:
        ids[:, 3] = torch.arange(length, dtype=torch.float32)
    return ids
