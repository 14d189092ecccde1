# solbench: problem=gelu_mlp_h1024_i4096_bias
"""gelu MLP (hidden 1024, intermediate 4096, with biases).

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch
import torch.nn.functional as F


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["hidden_states"] = torch.randn(a["num_tokens"], a["hidden_size"], dtype=torch.bfloat16, device=device)
    inputs["fc1_weight"] = torch.randn(a["intermediate_size"], a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["fc1_bias"] = (0.1 * torch.randn(a["intermediate_size"], device=device)).to(torch.bfloat16)
    inputs["fc2_weight"] = torch.randn(a["hidden_size"], a["intermediate_size"], dtype=torch.bfloat16, device=device).mul_(a["intermediate_size"] ** -0.5)
    inputs["fc2_bias"] = (0.1 * torch.randn(a["hidden_size"], device=device)).to(torch.bfloat16)
    return inputs


def mlp(x, fc1_weight, fc1_bias, fc2_weight, fc2_bias):
    """Two-layer MLP."""
    h = F.linear(x, fc1_weight, fc1_bias)
    return F.linear(F.gelu(h), fc2_weight, fc2_bias)


@torch.no_grad()
def run(hidden_states, fc1_weight, fc1_bias, fc2_weight, fc2_bias):
    """hidden_states: [num_tokens, hidden] -> [num_tokens, hidden]."""
    return mlp(hidden_states, fc1_weight, fc1_bias, fc2_weight, fc2_bias)
