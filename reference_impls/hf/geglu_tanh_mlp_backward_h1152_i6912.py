# solbench: problem=geglu_tanh_mlp_backward_h1152_i6912
"""Backward of a geglu_tanh gated MLP (hidden 1152, intermediate 6912): gradients for the input and every weight, recomputing the forward.

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
    inputs["grad_output"] = torch.randn(a["num_tokens"], a["hidden_size"], dtype=torch.bfloat16, device=device)
    return inputs


@torch.no_grad()
def run(hidden_states, gate_weight, up_weight, down_weight, grad_output):
    """Gradients of down(act(gate(x)) * up(x)) with respect to x and the three weights.

    hidden_states, grad_output: [num_tokens, hidden]. The forward is recomputed (activation checkpointing); the
    activation's derivative is taken in float32."""
    x = hidden_states
    gate = F.linear(x, gate_weight)
    up = F.linear(x, up_weight)
    act = F.gelu(gate, approximate="tanh")
    h = act * up
    grad_down_weight = grad_output.t() @ h
    grad_h = grad_output @ down_weight
    grad_up = grad_h * act
    g = gate.float()
    t = torch.tanh(0.7978845608028654 * (g + 0.044715 * g ** 3))  # sqrt(2 / pi)
    d_act = 0.5 * (1 + t) + 0.5 * g * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * g * g)
    grad_gate = (grad_h.float() * up.float() * d_act).to(x.dtype)
    grad_gate_weight = grad_gate.t() @ x
    grad_up_weight = grad_up.t() @ x
    grad_hidden_states = grad_gate @ gate_weight + grad_up @ up_weight
    return grad_hidden_states, grad_gate_weight, grad_up_weight, grad_down_weight
