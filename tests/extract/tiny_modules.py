"""Small nn.Modules for `--module` tests: importable as tests.extract.tiny_modules:Class."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class GatedBlock(nn.Module):
    """A norm, a gated MLP and a residual: a research block with plain constructor arguments."""

    def __init__(self, hidden: int, inner: int, eps: float = 1e-6):
        super().__init__()
        self.norm = nn.RMSNorm(hidden, eps=eps)
        self.gate_up = nn.Linear(hidden, 2 * inner, bias=False)
        self.down = nn.Linear(inner, hidden, bias=False)

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(self.norm(x)).chunk(2, dim=-1)
        return x + scale * self.down(F.silu(gate) * up)


class GatedMLP(GatedBlock):
    """The same block under an MLP's name: a kind the official dataset has backward problems of."""


class TokenMixer(nn.Module):
    """Token ids in, a mixed sequence out (an integer input with a value bound)."""

    def __init__(self, vocab: int, hidden: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.mix = nn.Conv1d(hidden, hidden, 3, padding=1, groups=hidden)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.mix(self.embed(ids).transpose(1, 2)).transpose(1, 2)


NOT_A_MODULE = 3


class HypernetworkMLP(nn.Module):
    """Linear, ReLU, linear, ReLU, linear, all with biases, as SAM's hypernetwork MLPs."""

    def __init__(self, hidden: int, out: int):
        super().__init__()
        self.proj_in = nn.Linear(hidden, hidden)
        self.hidden = nn.Linear(hidden, hidden)
        self.proj_out = nn.Linear(hidden, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj_out(F.relu(self.hidden(F.relu(self.proj_in(x)))))


class SlicedTokens(nn.Module):
    """Hands its MLP a strided view (one token of each [batch, points, tokens, channels] row), as SAM-HQ's
    mask decoder hands each hypernetwork MLP its mask token: the MLP is recorded with a non-contiguous input,
    and its problem draws contiguous ones."""

    def __init__(self, hidden: int, out: int):
        super().__init__()
        self.mlp = HypernetworkMLP(hidden, out)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.mlp(tokens[:, :, 0, :])
