"""Gradients that are zero in exact arithmetic: autograd's own float32 value is rounding noise, so the
backward check judges the reference against float64 autograd there (`backward_check.as_close_as_autograd`).

The case is SAM-HQ's mask-decoder attention: the gradient of its key projection's bias. A constant added
to every key of a row adds one number to every score of that row, which no softmax sees."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from solbench.extract.backward_check import FP32_LIMIT, as_close_as_autograd


def _bias_grads(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The key and query biases' gradients of a small cross-attention, by autograd in `dtype`."""
    gen = torch.Generator().manual_seed(0)
    query, key = (torch.randn(3, 6, 32, generator=gen), torch.randn(3, 64, 32, generator=gen))
    weights = [torch.randn(32, 32, generator=gen) / 32 ** 0.5 for _ in range(3)]
    biases = [torch.randn(32, generator=gen) for _ in range(3)]
    grad_out = torch.randn(3, 6, 32, generator=gen)
    weights, biases = [w.to(dtype) for w in weights], [b.to(dtype).requires_grad_() for b in biases]
    q = F.linear(query.to(dtype), weights[0], biases[0]).view(3, 6, 2, 16).transpose(1, 2)
    k = F.linear(key.to(dtype), weights[1], biases[1]).view(3, 64, 2, 16).transpose(1, 2)
    v = F.linear(key.to(dtype), weights[2], biases[2]).view(3, 64, 2, 16).transpose(1, 2)
    out = torch.softmax(q @ k.transpose(-1, -2) / 4, dim=-1) @ v
    grads = torch.autograd.grad(out.transpose(1, 2).reshape(3, 6, 32), [biases[1], biases[0]], grad_out.to(dtype))
    return grads[0].detach(), grads[1].detach()


def test_a_key_bias_gradient_is_noise_and_is_judged_against_float64():
    want, _ = _bias_grads(torch.float32)
    exact, _ = _bias_grads(torch.float64)
    noise = (want.double() - exact).abs().max().item()
    assert noise > exact.abs().max().item()  # autograd's float32 value has no significant digit
    other_noise = (exact - (want.double() - exact)).float()  # as far from the exact value, the other way
    scale_relative = (other_noise - want).abs().max().item() / want.abs().max().item()
    assert scale_relative > FP32_LIMIT  # what the plain check saw: a failure
    assert as_close_as_autograd(other_noise, want, exact)
    assert as_close_as_autograd(torch.zeros_like(want), want, exact)  # the exact answer, 0, passes too


def test_a_wrong_key_bias_gradient_still_fails():
    want, _ = _bias_grads(torch.float32)
    exact, _ = _bias_grads(torch.float64)
    noise = (want.double() - exact).abs().max().item()
    assert not as_close_as_autograd(want + 10 * noise, want, exact)
    assert not as_close_as_autograd(torch.full_like(want, 1e-3), want, exact)


def test_a_gradient_autograd_resolves_keeps_autograd_as_the_yardstick():
    """The query bias's gradient is not zero: float64 is never consulted for it, in float32 or bfloat16,
    however close the reference would be to the float64 value."""
    for dtype in (torch.float32, torch.bfloat16):
        _, want = _bias_grads(dtype)
        _, exact = _bias_grads(torch.float64)
        assert (want.double() - exact).abs().max().item() < exact.abs().max().item()
        assert not as_close_as_autograd(exact.to(dtype), want, exact)
