# solbench: problem=moe_router_softmax_topk_e64_k6_h2048_f32logits
"""MoE router: softmax over experts, top-k; 64 experts, top 6, hidden 2048.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch
import torch.nn.functional as F


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["hidden_states"] = torch.randn(a["num_tokens"], a["hidden_size"], dtype=torch.bfloat16, device=device)
    inputs["router_weight"] = torch.randn(a["num_experts"], a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    return inputs


TOP_K = 6


def route(x, router_weight):
    """Softmax over all experts in float32, keep the TOP_K largest.
    Expert ids are sorted by descending weight."""
    logits = F.linear(x.float(), router_weight.float())
    probs = torch.softmax(logits.float(), dim=-1)
    topk_weights, topk_ids = torch.topk(probs, TOP_K, dim=-1)
    return topk_weights, topk_ids


@torch.no_grad()
def run(hidden_states, router_weight):
    """hidden_states: [num_tokens, hidden] -> routing weights and expert ids, both [num_tokens, top_k]."""
    return route(hidden_states, router_weight)
