# solbench: problem=rmsnorm_h4096
"""RMSNorm with PyTorch's fused rms_norm, computed in float32 (value-returning).

Upcasting first keeps the statistics and the weight multiply in float32, as the reference
does, so the only rounding is the final cast to bfloat16.
"""

import torch
import torch.nn.functional as F

EPS = 1e-6


@torch.no_grad()
def run(hidden_states: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    hidden = hidden_states.shape[-1]
    y = F.rms_norm(hidden_states.float(), (hidden,), weight.float(), EPS)
    return y.to(hidden_states.dtype)
