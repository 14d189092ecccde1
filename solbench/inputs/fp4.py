"""FP4 (E2M1) packed two per byte, as `torch.float4_e2m1fn_x2` stores it.

Layout: a declared shape is the *packed* shape; its last dimension counts bytes, so a tensor of
shape (..., K) holds 2*K fp4 values. Element 2i is the low nibble of byte i, element 2i+1 the high
nibble (the convention the published references and NVIDIA's kernels use). Each nibble is
sign(1) exponent(2) mantissa(1); all 16 codes are finite numbers (E2M1 has no NaN or Inf), code 8
is -0.0. torch cannot convert this dtype to anything, so every conversion goes through uint8.
"""

from __future__ import annotations

import torch

# Value of each 4-bit code 0..15.
E2M1_VALUES: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                                  -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
FP4_DTYPE = torch.float4_e2m1fn_x2


def unpack_codes(packed: torch.Tensor) -> torch.Tensor:
    """uint8 codes 0..15, shape (..., 2*K), from a packed (..., K) fp4x2 (or uint8) tensor."""
    raw = packed.view(torch.uint8) if packed.dtype == FP4_DTYPE else packed
    if raw.dtype != torch.uint8:
        raise TypeError(f"expected float4_e2m1fn_x2 or uint8, got {packed.dtype}")
    if raw.dim() == 0:
        raw = raw.reshape(1)
    low, high = raw & 0x0F, raw >> 4
    return torch.stack((low, high), dim=-1).reshape(*raw.shape[:-1], raw.shape[-1] * 2)


def pack_codes(codes: torch.Tensor) -> torch.Tensor:
    """Pack uint8 codes 0..15 of shape (..., 2*K) into a float4_e2m1fn_x2 tensor (..., K)."""
    if codes.dtype != torch.uint8:
        raise TypeError(f"codes must be uint8, got {codes.dtype}")
    if codes.dim() == 0 or codes.shape[-1] % 2:
        raise ValueError(f"the last dimension of fp4 codes must be even, got shape {tuple(codes.shape)}")
    if codes.numel() and int(codes.max()) > 15:
        raise ValueError("fp4 codes must be in 0..15")
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return packed.contiguous().view(FP4_DTYPE)


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """float32 values, shape (..., 2*K), of a packed fp4x2 tensor (..., K); on the same device."""
    table = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=packed.device)
    return table[unpack_codes(packed).long()]


def quantize_to_codes(values: torch.Tensor) -> torch.Tensor:
    """Nearest E2M1 code for each value (ties go to the smaller magnitude; beyond ±6 clamps)."""
    magnitudes = torch.tensor(E2M1_VALUES[:8], dtype=torch.float32, device=values.device)
    v = values.to(torch.float32)
    distance = (v.abs().unsqueeze(-1) - magnitudes).abs()
    code = distance.argmin(dim=-1).to(torch.uint8)
    return torch.where(torch.signbit(v), code | 0x08, code)


def pack_fp4(values: torch.Tensor) -> torch.Tensor:
    """Quantize float values (..., 2*K) to the nearest fp4 and pack them (..., K)."""
    return pack_codes(quantize_to_codes(values))
