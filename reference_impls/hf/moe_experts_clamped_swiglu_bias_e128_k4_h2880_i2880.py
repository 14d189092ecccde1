# solbench: problem=moe_experts_clamped_swiglu_bias_e128_k4_h2880_i2880
"""MoE clamped SwiGLU experts with biases (gpt-oss layout): 128 experts of intermediate size 2880, hidden 2880, 4 per token; each token's outputs are summed with its routing weights.

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
    inputs["gate_up_weight"] = torch.randn(a["num_experts"], a["hidden_size"], 5760, dtype=torch.bfloat16, device=device).mul_(a["hidden_size"] ** -0.5)
    inputs["gate_up_bias"] = (0.1 * torch.randn(a["num_experts"], 5760, device=device)).to(torch.bfloat16)
    inputs["down_weight"] = torch.randn(a["num_experts"], a["intermediate_size"], a["hidden_size"], dtype=torch.bfloat16, device=device).mul_(a["intermediate_size"] ** -0.5)
    inputs["down_bias"] = (0.1 * torch.randn(a["num_experts"], a["hidden_size"], device=device)).to(torch.bfloat16)
    return inputs


ALPHA = 1.702
LIMIT = 7.0


def experts(x, topk_ids, topk_weights, gate_up_weight, gate_up_bias, down_weight, down_bias):
    """Routed experts with interleaved gate/up columns, clamping and biases; only selected experts run.
    x: [tokens, hidden]; gate_up_weight: [experts, hidden, 2 * intermediate]; down_weight: [experts, intermediate, hidden]."""
    output = torch.zeros_like(x)
    expert_mask = F.one_hot(topk_ids, num_classes=gate_up_weight.shape[0]).permute(2, 1, 0)
    for expert in torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()[:, 0].tolist():
        slot, token_idx = torch.where(expert_mask[expert])
        gate_up = x[token_idx] @ gate_up_weight[expert] + gate_up_bias[expert]
        gate, up = gate_up[..., ::2], gate_up[..., 1::2]
        gate = gate.clamp(max=LIMIT)
        up = up.clamp(min=-LIMIT, max=LIMIT)
        h = (up + 1) * (gate * torch.sigmoid(gate * ALPHA))
        y = h @ down_weight[expert] + down_bias[expert]
        y = y * topk_weights[token_idx, slot, None]
        output.index_add_(0, token_idx, y.to(output.dtype))
    return output


@torch.no_grad()
def run(hidden_states, topk_ids, topk_weights, gate_up_weight, gate_up_bias, down_weight, down_bias):
    """hidden_states: [num_tokens, hidden]; topk_ids/topk_weights: [num_tokens, top_k] -> [num_tokens, hidden]."""
    return experts(hidden_states, topk_ids, topk_weights, gate_up_weight, gate_up_bias, down_weight, down_bias)
