"""The SwiGLU MLP of a decoder layer (Qwen3-1.7B sizes): down(silu(gate(x)) * up(x)).

gate and up are one merged projection, as inference engines store them: rows
[0, intermediate_size) of `gate_up_weight` are the gate, the rest are up. Projections
take and return bfloat16 (float32 accumulation); the activation is computed in float32
and rounded to bfloat16 before the down projection.
"""

import torch
import torch.nn.functional as F


@torch.no_grad()
def run(hidden_states, gate_up_weight, down_weight):
    gate, up = F.linear(hidden_states, gate_up_weight).chunk(2, dim=-1)
    activation = F.silu(gate.to(torch.float32)) * up.to(torch.float32)
    return F.linear(activation.to(hidden_states.dtype), down_weight)
