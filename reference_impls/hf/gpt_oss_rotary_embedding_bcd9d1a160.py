# solbench: problem=gpt_oss_rotary_embedding_bcd9d1a160
"""GptOssRotaryEmbedding, captured with torch.export and emitted at torch/F level; the models and modules that share it are recorded in definition.json.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["inv_freq"] = torch.tensor([1.0, 0.6890442967414856, 0.4747820496559143, 0.32714587450027466, 0.22541800141334534, 0.15532298386096954, 0.1070244237780571, 0.07374456524848938, 0.05081327259540558, 0.031705696135759354, 0.019334999844431877, 0.011592049151659012, 0.006794959306716919, 0.0038603590801358223, 0.002093792660161853, 0.00105260219424963, 0.0004564839182421565, 0.00012931869423482567, 3.830881178146228e-05, 2.6396468456368893e-05, 1.818833698052913e-05, 1.253256959898863e-05, 8.635495760245249e-06, 5.95023948335438e-06, 4.099978468730114e-06, 2.8250667583051836e-06, 1.9465962850517826e-06, 1.3412909538601525e-06, 9.242089618055616e-07, 6.368209142237902e-07, 4.38797854940276e-07, 3.023511396804679e-07], dtype=torch.float32, device=device)
    inputs["position_ids"] = torch.arange(a["seq_len"], device=device).expand(1, a["seq_len"]).contiguous().to(torch.int64)
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
