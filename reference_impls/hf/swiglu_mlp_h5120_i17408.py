# solbench: problem=swiglu_mlp_h5120_i17408
"""swiglu gated MLP (hidden 5120, intermediate 17408).

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch
import torch.nn.functional as F


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["hidden_states"] = torch.randn(a["num_tokens"], a["hidden_size"], dtype=torch.bfloat16, device=device)
    inputs["gate_weight"] = torch.randn(a["intermediate_size"], a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["up_weight"] = torch.randn(a["intermediate_size"], a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["down_weight"] = torch.randn(a["hidden_size"], a["intermediate_size"], dtype=torch.bfloat16, device=device).mul_(a["intermediate_size"] ** -0.5)
    return inputs


def mlp(x, gate_weight, up_weight, down_weight):
    """Gated MLP: down(act(gate(x)) * up(x))."""
    gate = F.linear(x, gate_weight)
    up = F.linear(x, up_weight)
    return F.linear(F.silu(gate) * up, down_weight)


@torch.no_grad()
def run(hidden_states, gate_weight, up_weight, down_weight):
    """hidden_states: [num_tokens, hidden] -> [num_tokens, hidden]."""
    return mlp(hidden_states, gate_weight, up_weight, down_weight)
