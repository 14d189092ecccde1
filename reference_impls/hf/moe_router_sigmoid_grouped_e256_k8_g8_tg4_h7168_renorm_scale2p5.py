# solbench: problem=moe_router_sigmoid_grouped_e256_k8_g8_tg4_h7168_renorm_scale2p5
"""MoE router: sigmoid scores with a selection bias, group-limited top-k (4 of 8 groups), renormalised and scaled by 2.5; 256 experts, top 8, hidden 7168.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch
import torch.nn.functional as F


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["hidden_states"] = torch.randn(a["num_tokens"], a["hidden_size"], dtype=torch.bfloat16, device=device)
    inputs["router_weight"] = torch.randn(a["num_experts"], a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["score_bias"] = (0.1 * torch.randn(a["num_experts"], device=device)).to(torch.float32)
    return inputs


TOP_K = 8
NUM_GROUPS = 8
TOPK_GROUPS = 4
ROUTED_SCALING = 2.5


def route(x, router_weight, score_bias):
    """Sigmoid scores; the bias only steers selection. Experts come from the TOPK_GROUPS groups whose two best
    biased scores sum highest. Expert ids are sorted by descending biased score."""
    logits = F.linear(x.float(), router_weight.float())
    scores = logits.sigmoid()
    choice = scores + score_bias
    num_experts = router_weight.shape[0]
    per_group = num_experts // NUM_GROUPS
    group_scores = choice.view(-1, NUM_GROUPS, per_group).topk(2, dim=-1).values.sum(dim=-1)
    top_groups = torch.topk(group_scores, TOPK_GROUPS, dim=-1).indices
    group_mask = torch.zeros_like(group_scores).scatter_(1, top_groups, 1.0)
    expert_mask = group_mask.unsqueeze(-1).expand(-1, NUM_GROUPS, per_group).reshape(-1, num_experts)
    choice = choice.masked_fill(~expert_mask.bool(), float("-inf"))
    topk_ids = torch.topk(choice, TOP_K, dim=-1).indices
    topk_weights = scores.gather(1, topk_ids)
    topk_weights = topk_weights / (topk_weights.sum(dim=-1, keepdim=True) + 1e-20)
    return topk_weights * ROUTED_SCALING, topk_ids


@torch.no_grad()
def run(hidden_states, router_weight, score_bias):
    """hidden_states: [num_tokens, hidden] -> routing weights and expert ids, both [num_tokens, top_k]."""
    return route(hidden_states, router_weight, score_bias)
