# solbench: problem=moe_router_softmax_topk_e8_k2_h4096_renorm_f32weights
"""MoE router: softmax over experts, top-k, renormalised; 8 experts, top 2, hidden 4096.

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


TOP_K = 2


def route(x, router_weight):
    """Softmax over all experts in float32, keep the TOP_K largest, renormalised to sum to 1.
    Expert ids are sorted by descending weight."""
    logits = F.linear(x, router_weight)
    probs = torch.softmax(logits.float(), dim=-1)
    topk_weights, topk_ids = torch.topk(probs, TOP_K, dim=-1)
    topk_weights = topk_weights / topk_weights.sum(dim=-1, keepdim=True)
    return topk_weights, topk_ids


@torch.no_grad()
def run(hidden_states, router_weight):
    """hidden_states: [num_tokens, hidden] -> routing weights and expert ids, both [num_tokens, top_k]."""
    return route(hidden_states, router_weight)
