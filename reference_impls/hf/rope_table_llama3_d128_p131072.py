# solbench: problem=rope_table_llama3_d128_p131072
"""RoPE table (llama3): each position times the inverse frequencies (fixed at init), as cos and sin of width 128.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["position_ids"] = torch.randint(0, a["max_positions"], (a["batch_size"], a["seq_len"],), dtype=torch.int64, device=device)
    inputs["inv_freq"] = (0.1 * torch.randn(a["half_dim"], device=device)).to(torch.float32)
    return inputs


ATTENTION_SCALING = 1.0


@torch.no_grad()
def run(position_ids, inv_freq):
    """position_ids: [batch, seq], inv_freq: [head_dim / 2] -> cos, sin: [batch, seq, head_dim]."""
    freqs = position_ids[..., None].float() * inv_freq.float()
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos() * ATTENTION_SCALING
    sin = emb.sin() * ATTENTION_SCALING
    return cos.to(torch.bfloat16), sin.to(torch.bfloat16)
