# solbench: problem=layernorm_h1024_eps1e-12
"""LayerNorm with weight and bias over hidden size 1024, eps 1e-12.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch
import torch.nn.functional as F


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["hidden_states"] = torch.randn(a["num_tokens"], a["hidden_size"], dtype=torch.bfloat16, device=device)
    inputs["weight"] = (1.0 + 0.1 * torch.randn(a["hidden_size"], device=device)).to(torch.bfloat16)
    inputs["bias"] = (0.1 * torch.randn(a["hidden_size"], device=device)).to(torch.bfloat16)
    return inputs


EPS = 1e-12


def layer_norm(x, weight, bias, eps):
    """LayerNorm over the last dimension."""
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


@torch.no_grad()
def run(hidden_states, weight, bias):
    return layer_norm(hidden_states, weight, bias, EPS)
