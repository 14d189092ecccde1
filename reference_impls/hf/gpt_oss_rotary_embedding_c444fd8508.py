# solbench: problem=gpt_oss_rotary_embedding_c444fd8508
"""GptOssRotaryEmbedding, captured with torch.export and emitted at torch/F level; the models and modules that share it are recorded in definition.json.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["inv_freq"] = (0.1 * torch.randn(32, device=device)).to(torch.float32)
    inputs["position_ids"] = torch.zeros((1, a["seq_len"],), dtype=torch.int64, device=device)
    return inputs


def run(inv_freq, position_ids):
    device = inv_freq.device
    unsqueeze = position_ids.unsqueeze(2)
    to = unsqueeze.to(torch.float32)
    to_1 = inv_freq.to(device, torch.float32)
    mul = torch.mul(to, to_1)
    cos = torch.cos(mul)
    mul_1 = torch.mul(cos, 1.3465735902799727)
    sin = torch.sin(mul)
    mul_2 = torch.mul(sin, 1.3465735902799727)
    to_2 = mul_1.to(torch.bfloat16)
    to_3 = mul_2.to(torch.bfloat16)
    return to_2, to_3
