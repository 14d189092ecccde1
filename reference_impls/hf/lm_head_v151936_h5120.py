# solbench: problem=lm_head_v151936_h5120
"""LM head: project hidden states (width 5120) to logits over a vocabulary of 151936.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch
import torch.nn.functional as F


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["hidden_states"] = torch.randn(a["num_tokens"], a["hidden_size"], dtype=torch.bfloat16, device=device)
    inputs["weight"] = torch.randn(a["vocab_size"], a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    return inputs


@torch.no_grad()
def run(hidden_states, weight):
    """hidden_states: [num_tokens, hidden] -> logits [num_tokens, vocab]."""
    return F.linear(hidden_states, weight)
