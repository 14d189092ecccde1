# solbench: problem=rmsnorm_oneplus_h5376_eps1e-06
"""RMSNorm with a zero-centred weight, output = x_hat * (1 + weight) over hidden size 5376, eps 1e-06.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["hidden_states"] = torch.randn(a["num_tokens"], a["hidden_size"], dtype=torch.bfloat16, device=device)
    inputs["weight"] = (0.1 * torch.randn(a["hidden_size"], device=device)).to(torch.bfloat16)
    return inputs


EPS = 1e-06


def rms_norm(x, weight, eps):
    """RMSNorm with a zero-centred weight: scale by (1 + weight) in float32, then cast back."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (h * (1.0 + weight.float())).to(x.dtype)


@torch.no_grad()
def run(hidden_states, weight):
    return rms_norm(hidden_states, weight, EPS)
