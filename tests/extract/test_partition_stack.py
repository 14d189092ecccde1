"""What partition calls a stack of layers: repeated modules of one class, not any list of modules."""

from __future__ import annotations

from torch import nn

from solbench.extract.partition import _excluded, is_layer_stack


class Attention(nn.Module):  # diffusers' shape: the output projection and its dropout in one ModuleList
    def __init__(self):
        super().__init__()
        self.to_q = nn.Linear(8, 8)
        self.to_out = nn.ModuleList([nn.Linear(8, 8), nn.Dropout(0.0)])


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Attention(), Attention()])


def test_a_list_of_different_modules_is_not_a_stack():
    assert not is_layer_stack(Attention().to_out)
    assert is_layer_stack(Encoder().layers)
    assert _excluded("attn", Attention()) == ""
    assert "stack of layers" in _excluded("encoder", Encoder())


class UNetMidBlock2D(nn.Module):  # diffusers' bottleneck: resnet, attention, resnet
    def __init__(self, attention: nn.Module):
        super().__init__()
        self.resnets = nn.ModuleList([nn.Conv2d(4, 4, 3), nn.Conv2d(4, 4, 3)])
        self.attentions = nn.ModuleList([attention])


def test_a_mid_block_is_a_block_unless_its_attention_is_a_stack():
    assert _excluded("decoder.mid_block", UNetMidBlock2D(Attention())) == ""
    assert "stack of layers" in _excluded("mid_block", UNetMidBlock2D(Encoder()))  # SD-XL: ten layers inside
