"""RMSNorm over a 4096-wide hidden state (Qwen3-8B / Llama-3.1-8B width), eps = 1e-6.

The mean of squares, the scaling and the weight multiply are all done in float32;
the result is rounded to bfloat16 once, at the end.
"""

import torch

EPS = 1e-6


@torch.no_grad()
def run(hidden_states, weight):
    x = hidden_states.to(torch.float32)
    inv_rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS)
    return (x * inv_rms * weight.to(torch.float32)).to(torch.bfloat16)
