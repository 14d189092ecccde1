# solbench: problem=rope_table_d128_theta1000000_p40960
"""RoPE table: inverse frequencies 1 / theta^(2i/128) for theta 1e+06 (computed at init in transformers), times each position, as cos and sin of width 128.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["position_ids"] = torch.randint(0, a["max_positions"], (a["batch_size"], a["seq_len"],), dtype=torch.int64, device=device)
    return inputs


ROPE_THETA = 1000000.0
ATTENTION_SCALING = 1.0


@torch.no_grad()
def run(position_ids):
    """position_ids: [batch, seq] -> cos, sin: [batch, seq, head_dim]."""
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, 128, 2, dtype=torch.int64,
                                                  device=position_ids.device).float() / 128))
    freqs = position_ids[..., None].float() * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos() * ATTENTION_SCALING
    sin = emb.sin() * ATTENTION_SCALING
    return cos.to(torch.bfloat16), sin.to(torch.bfloat16)
