"""What partition calls a stack of layers: repeated modules of one class, not any list of modules."""

from __future__ import annotations

import torch
from torch import nn

from solbench.extract.built import BuiltModel
from solbench.extract.capture import record_calls
from solbench.extract.partition import _excluded, blocks, is_layer_stack


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
    assert _excluded("attn", Attention(), []) == ""
    assert "stack of layers" in _excluded("encoder", Encoder(), [])  # no recording: repeated is a stack


class UNetMidBlock2D(nn.Module):  # diffusers' bottleneck: resnet, attention, resnet
    def __init__(self, attention: nn.Module):
        super().__init__()
        self.resnets = nn.ModuleList([nn.Conv2d(4, 4, 3), nn.Conv2d(4, 4, 3)])
        self.attentions = nn.ModuleList([attention])


def test_a_mid_block_is_a_block_unless_its_attention_is_a_stack():
    assert _excluded("decoder.mid_block", UNetMidBlock2D(Attention()), []) == ""
    assert "stack of layers" in _excluded("mid_block", UNetMidBlock2D(Encoder()), [])  # SD-XL: ten layers inside


class Decoder(nn.Module):
    """SAM's mask decoder in miniature: a stack of layers (each fed the one before) and one MLP per mask token
    (each on its own token): repeated modules both, a stack only the first."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 8)])
        self.heads = nn.ModuleList([nn.Linear(8, 4), nn.Linear(8, 4), nn.Linear(8, 4)])

    def forward(self, tokens):
        for layer in self.layers:
            tokens = torch.relu(layer(tokens))
        return torch.stack([head(tokens[:, i]) for i, head in enumerate(self.heads)], dim=1)


class Model(nn.Module):
    def __init__(self, decoder: nn.Module):
        super().__init__()
        self.embed = nn.Linear(6, 8)
        self.decoder = decoder

    def forward(self, features):
        return self.decoder(self.embed(features))


def _recorded(module: nn.Module, features=lambda b: torch.randn(b, 3, 6)) -> tuple[nn.Module, list[dict]]:
    module = Model(module).eval().to("meta")
    built = BuiltModel("test/decoder", module, "module", lambda axes, dtype: ((features(axes["b"]),), {}),
                       {"b": (2, 3)}, {"b": (4,)})
    return module, [record_calls(built, {"b": b}, torch.float32) for b in (2, 3)]


def test_parallel_heads_are_not_a_stack_and_their_holder_is_a_block():
    model, calls = _recorded(Decoder())
    assert calls[0]["decoder.layers.1"].follows_sibling and not calls[0]["decoder.heads.1"].follows_sibling
    kinds, left = blocks(model, calls)
    assert any(b.path == "decoder" for b in kinds) is False  # its layers are a stack: still left out
    flat = Decoder()
    flat.layers = nn.ModuleList([nn.Identity()])  # no stack left, only the heads
    model, calls = _recorded(flat)
    kinds, left = blocks(model, calls)
    assert "decoder" in [b.path for b in kinds], [(n.path, n.reason) for n in left]


class ConvBlock(nn.Module):
    def __init__(self, **conv):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, **conv)

    def forward(self, x):
        return torch.relu(self.conv(x))


class Convs(nn.Module):
    """Three blocks of one class, with the same weights' shape and input, apart only in their convolution's
    padding or stride (tuples)."""

    def __init__(self):
        super().__init__()
        self.same = ConvBlock(padding=1)
        self.valid = ConvBlock(padding=0)
        self.strided = ConvBlock(padding=1, stride=2)

    def forward(self, x):
        return self.same(x).sum() + self.valid(x).sum() + self.strided(x).sum()


def test_modules_apart_only_in_a_tuple_attribute_are_two_kinds():
    module, calls = _recorded(Convs(), lambda b: torch.randn(b, 4, 8, 6))
    kinds = [b for b in blocks(module, calls)[0] if b.class_name == "ConvBlock"]
    assert sorted(b.path for b in kinds) == ["decoder.same", "decoder.strided", "decoder.valid"]  # one problem each
