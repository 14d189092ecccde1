# solbench: problem=layernorm_fp32_h1024
"""LayerNorm with PyTorch's fused kernel (destination-passing: writes into `y`).

torch's layer_norm has no out= form, so the result is copied into the harness's buffer;
that copy is the price of this calling convention for a library op.
"""

import torch
import torch.nn.functional as F

EPS = 1e-5


@torch.no_grad()
def run(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, y: torch.Tensor) -> None:
    y.copy_(F.layer_norm(x, (x.shape[-1],), weight, bias, EPS))
