# solbench: problem=rmsnorm_backward_h5120_eps1e-05
"""Backward of RMSNorm over hidden size 5120 (eps 1e-05): gradients for the input and the weight; the normalisation statistics are recomputed.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["hidden_states"] = torch.randn(a["num_tokens"], a["hidden_size"], dtype=torch.bfloat16, device=device)
    inputs["weight"] = (1.0 + 0.1 * torch.randn(a["hidden_size"], device=device)).to(torch.bfloat16)
    inputs["grad_output"] = torch.randn(a["num_tokens"], a["hidden_size"], dtype=torch.bfloat16, device=device)
    return inputs


EPS = 1e-05


@torch.no_grad()
def run(hidden_states, weight, grad_output):
    """Gradients of weight * (x * rsqrt(mean(x^2) + EPS)).to(dtype) for x and weight.

    hidden_states, grad_output: [num_tokens, hidden]; weight: [hidden]."""
    x = hidden_states.float()
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
    x_hat = x * rstd
    grad = grad_output.float()
    grad_weight = (grad * x_hat.to(hidden_states.dtype).float()).sum(dim=0)
    grad_x_hat = grad * weight.float()
    grad_x = rstd * (grad_x_hat - x_hat * (grad_x_hat * x_hat).mean(-1, keepdim=True))
    return grad_x.to(hidden_states.dtype), grad_weight.to(weight.dtype)
