# solbench: problem=moe_experts_swiglu_e128_k8_h4096_i1536
"""MoE swiglu experts: 128 experts of intermediate size 1536, hidden 4096, 8 per token; each token's outputs are summed with its routing weights.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch
import torch.nn.functional as F


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["hidden_states"] = torch.randn(a["num_tokens"], a["hidden_size"], dtype=torch.bfloat16, device=device)
    inputs["topk_ids"] = torch.rand(a["num_tokens"], a["num_experts"], device=device).argsort(dim=-1)[..., : a["top_k"]].to(torch.int64)
    inputs["topk_weights"] = torch.softmax(torch.randn(a["num_tokens"], a["top_k"], device=device), dim=-1).to(torch.bfloat16)
    inputs["gate_up_weight"] = torch.randn(a["num_experts"], 3072, a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["down_weight"] = torch.randn(a["num_experts"], a["hidden_size"], a["intermediate_size"], dtype=torch.bfloat16, device=device).mul_(a["intermediate_size"] ** -0.5)
    return inputs


def experts(x, topk_ids, topk_weights, gate_up_weight, down_weight):
    """Routed gated experts; only experts some token selected are computed, found as the modules find them
    (a one-hot mask with one class more than experts: the modules' slot for a token routed nowhere).
    x: [tokens, hidden]; gate_up_weight: [experts, 2 * intermediate, hidden] (gate rows first);
    down_weight: [experts, hidden, intermediate]."""
    output = torch.zeros_like(x)
    num_experts = gate_up_weight.shape[0]
    expert_mask = F.one_hot(topk_ids, num_classes=num_experts + 1).permute(2, 1, 0)
    for expert in torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()[:, 0].tolist():
        if expert == num_experts:
            continue
        slot, token_idx = torch.where(expert_mask[expert])
        gate, up = F.linear(x[token_idx], gate_up_weight[expert]).chunk(2, dim=-1)
        y = F.linear(F.silu(gate) * up, down_weight[expert])
        y = y * topk_weights[token_idx, slot, None]
        output.index_add_(0, token_idx, y.to(output.dtype))
    return output


@torch.no_grad()
def run(hidden_states, topk_ids, topk_weights, gate_up_weight, down_weight):
    """hidden_states: [num_tokens, hidden]; topk_ids/topk_weights: [num_tokens, top_k] -> [num_tokens, hidden]."""
    return experts(hidden_states, topk_ids, topk_weights, gate_up_weight, down_weight)
