# solbench: problem=swiglu_mlp_backward_h2048_i10944
"""Backward of a SwiGLU MLP (hidden 2048, intermediate 10944): gradients for the input and the gate, up and down weights, recomputing the forward.

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
    """Gradients of down(silu(gate(x)) * up(x)) with respect to x and the three weights.

    hidden_states, grad_output: [num_tokens, hidden]. The forward is recomputed (activation checkpointing)."""
    x = hidden_states
    gate = F.linear(x, gate_weight)
    up = F.linear(x, up_weight)
    act = F.silu(gate)
    h = act * up
    grad_down_weight = grad_output.t() @ h
    grad_h = grad_output @ down_weight
    grad_up = grad_h * act
    sig = torch.sigmoid(gate.float())
    grad_gate = (grad_h.float() * up.float() * sig * (1 + gate.float() * (1 - sig))).to(x.dtype)
    grad_gate_weight = grad_gate.t() @ x
    grad_up_weight = grad_up.t() @ x
    grad_hidden_states = grad_gate @ gate_weight + grad_up @ up_weight
    return grad_hidden_states, grad_gate_weight, grad_up_weight, grad_down_weight
