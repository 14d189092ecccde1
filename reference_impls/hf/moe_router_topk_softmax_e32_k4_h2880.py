# solbench: problem=moe_router_topk_softmax_e32_k4_h2880
"""MoE router: top-k logits (with bias), softmax over the selected; 32 experts, top 4, hidden 2880.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch
import torch.nn.functional as F


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["hidden_states"] = torch.randn(a["num_tokens"], a["hidden_size"], dtype=torch.bfloat16, device=device)
    inputs["router_weight"] = torch.randn(a["num_experts"], a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["router_bias"] = (0.1 * torch.randn(a["num_experts"], device=device)).to(torch.bfloat16)
    return inputs


TOP_K = 4


def route(x, router_weight, router_bias):
    """Keep the TOP_K largest logits, then softmax over just those. Expert ids are sorted by descending weight."""
    logits = F.linear(x, router_weight, router_bias)
    top_logits, topk_ids = torch.topk(logits, TOP_K, dim=-1)
    return torch.softmax(top_logits, dim=-1), topk_ids


@torch.no_grad()
def run(hidden_states, router_weight, router_bias):
    """hidden_states: [num_tokens, hidden] -> routing weights and expert ids, both [num_tokens, top_k]."""
    return route(hidden_states, router_weight, router_bias)
