# solbench: problem=swiglu_mlp_gateupfused_backward_h5120_i17920
"""Backward of a swiglu gated MLP with a fused gate/up weight (hidden 5120, intermediate 17920): gradients for the input and every weight, recomputing the forward.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch
import torch.nn.functional as F


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["hidden_states"] = torch.randn(a["num_tokens"], a["hidden_size"], dtype=torch.bfloat16, device=device)
    inputs["gate_up_weight"] = torch.randn(35840, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["down_weight"] = torch.randn(a["hidden_size"], a["intermediate_size"], dtype=torch.bfloat16, device=device).mul_(a["intermediate_size"] ** -0.5)
    inputs["grad_output"] = torch.randn(a["num_tokens"], a["hidden_size"], dtype=torch.bfloat16, device=device)
    return inputs


@torch.no_grad()
def run(hidden_states, gate_up_weight, down_weight, grad_output):
    """Gradients of down(act(gate) * up), where gate, up = chunk(gate_up(x), 2), with respect to x and both weights.

    hidden_states, grad_output: [num_tokens, hidden]; gate_up_weight: [2 * intermediate, hidden] (gate rows first).
    The forward is recomputed (activation checkpointing); the activation's derivative is taken in float32."""
    x = hidden_states
    gate, up = F.linear(x, gate_up_weight).chunk(2, dim=-1)
    act = F.silu(gate)
    h = act * up
    grad_down_weight = grad_output.t() @ h
    grad_h = grad_output @ down_weight
    grad_up = grad_h * act
    g = gate.float()
    sig = torch.sigmoid(g)
    d_act = sig * (1 + g * (1 - sig))
    grad_gate = (grad_h.float() * up.float() * d_act).to(x.dtype)
    grad_gate_up = torch.cat((grad_gate, grad_up), dim=-1)
    grad_gate_up_weight = grad_gate_up.t() @ x
    grad_hidden_states = grad_gate_up @ gate_up_weight
    return grad_hidden_states, grad_gate_up_weight, grad_down_weight
