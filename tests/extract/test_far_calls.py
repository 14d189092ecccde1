"""The far calls that tell whether a block's export depends on its size (`far_calls`), and a block met again
in another model of the same run (`block_reuse`): what each saves, and that neither changes a draft."""

from __future__ import annotations

import torch
from torch import nn

from solbench.extract import blocks, capture, far_calls, reuse
from solbench.extract.built import BuiltModel


def _call(*shapes: tuple[int, ...]) -> capture.Call:
    return capture.Call(tuple(torch.empty(s, device="meta") for s in shapes), {})


def test_flattened_tokens_are_scaled_as_a_product_of_model_axes():
    points = [{"batch": 2, "seq": 16}, {"batch": 3, "seq": 24}, {"batch": 2, "seq": 40}]
    flat = [_call((p["batch"] * p["seq"], 8), (p["batch"], p["seq"], 8)) for p in points]
    far = far_calls.scaled_call(flat, points, {"batch": 9, "seq": 4097})
    assert [tuple(x.shape) for x in far.leaves()] == [(9 * 4097, 8), (9, 4097, 8)]
    squared = [_call((p["seq"] * p["seq"] + 1, 8)) for p in points]  # no line and no product: not guessed
    assert far_calls.scaled_call(squared, points, {"batch": 9, "seq": 4097}) is None


class ChunkLoop(nn.Module):
    """A Python loop over chunks of 16 tokens (Qwen3-Next's gated delta rule, in miniature): one chunk at
    every capture size, more past the model's largest sizes, where a trace unrolls each."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        state = torch.zeros_like(x[:, 0])
        outs = []
        for chunk in x.split(16, dim=1):
            state = torch.tanh(state + self.proj(chunk).sum(dim=1))
            outs.append(chunk * state.unsqueeze(1))
        return torch.cat(outs, dim=1)


class Mlp(nn.Module):
    def __init__(self, act=torch.relu):
        super().__init__()
        self.up, self.down, self.act = nn.Linear(8, 16), nn.Linear(16, 8), act

    def forward(self, x):
        return self.down(self.act(self.up(x)))


class Model(nn.Module):
    def __init__(self, first: nn.Module, act=torch.relu, mlp: str = "mlp"):
        super().__init__()
        self.embed, self.first, self.last = nn.Linear(6, 8), first, mlp
        setattr(self, mlp, Mlp(act))

    def forward(self, x):
        return getattr(self, self.last)(self.first(self.embed(x)))


def _built(model: nn.Module, name: str = "test/far") -> BuiltModel:
    return BuiltModel(name, model.eval().to("meta"), "module",
                      lambda axes, dtype: ((torch.randn(axes["batch"], axes["seq"], 6, dtype=dtype),), {}),
                      {"batch": (4, 2, 3), "seq": (6, 4, 8)}, {"batch": (1, 2), "seq": (8, 32, 64)})


def _spied(monkeypatch, static: list[str] | None = None) -> list[str]:
    exported: list[str] = []
    real = blocks._export

    def spy(block, call, dynamic):
        exported.append(block.path)
        if dynamic is None and static is not None:
            static.append(block.path)
        return real(block, call, dynamic)

    monkeypatch.setattr(blocks, "_export", spy)
    return exported


def test_a_loop_over_chunks_is_counted_on_fake_tensors_and_never_exported_past_the_largest_sizes(monkeypatch):
    static: list[str] = []
    exported = _spied(monkeypatch, static)
    result = blocks.extract_blocks(_built(Model(ChunkLoop())), torch.bfloat16, validate=True)
    assert exported.count("first") == 1  # counts of 1, 2 and 3 chunks disagree: no far export
    assert exported.count("mlp") == 2  # traced, and once past the largest sizes (same code: confirmed)
    assert static.count("mlp") == 1  # that far export static (`far_match`): no dynamic one needed
    loop = next(d for d in result.drafts if d.name.startswith("chunk_loop_"))
    assert loop.workload_points and max(p["seq"] for p in loop.workload_points) <= 8  # validated sizes only
    mlp = next(d for d in result.drafts if d.name.startswith("mlp_"))
    assert max(p["seq"] for p in mlp.workload_points) == 64  # confirmed past the largest sizes: all kept
    assert all(v.passed for v in result.validations)


def test_a_block_met_again_in_a_later_model_of_the_run_is_not_extracted_again(monkeypatch):
    exported = _spied(monkeypatch)
    with reuse.session():
        first = blocks.extract_blocks(_built(Model(nn.LayerNorm(8)), "test/a"), torch.bfloat16, validate=True)
        exported.clear()
        second = blocks.extract_blocks(_built(Model(nn.Sequential(nn.Linear(8, 8)), mlp="ffn"), "test/b"), torch.bfloat16,
                                       validate=True)
        assert "ffn" not in exported and "first.0" in exported  # the shared block came from the first model
        other = blocks.extract_blocks(_built(Model(nn.LayerNorm(8), act=torch.tanh), "test/c"), torch.bfloat16,
                                      validate=True)
        assert exported.count("mlp") == 2  # the MLP holds another activation: its own extraction
    a, b, c = (next(d for d in r.drafts if d.name.startswith("mlp_")) for r in (first, second, other))
    assert a.name == b.name and a.code == b.code and a.workload_points == b.workload_points
    assert c.name != a.name and "tanh" in c.code
    assert a.hints["module_paths"] == ["mlp"] and b.hints["module_paths"] == ["ffn"]  # each model's own
    shared = [v for v in second.validations if v.problem == b.name]
    assert len(shared) == 1 and shared[0].passed and shared[0].exact == {"float32": True, "bfloat16": True}

    exported.clear()  # outside a run over several models nothing is kept
    blocks.extract_blocks(_built(Model(nn.LayerNorm(8)), "test/a"), torch.bfloat16, validate=False)
    assert exported.count("mlp") == 2


def test_what_a_module_holds_beyond_its_signature_decides_reuse():
    """A block's key takes in what the structural signature leaves out: a plain tensor attribute's values,
    a held function, a config's fields."""
    from transformers import LlamaConfig

    from solbench.extract.block_reuse import _held

    def holding(**values) -> nn.Module:
        module = nn.Module()
        for name, value in values.items():
            setattr(module, name, value)
        return module

    assert _held(holding(table=torch.tensor([1.0, 2.0]))) == _held(holding(table=torch.tensor([1.0, 2.0])))
    assert _held(holding(table=torch.tensor([1.0, 2.0]))) != _held(holding(table=torch.tensor([1.0, 3.0])))
    assert _held(holding(act=torch.relu)) != _held(holding(act=torch.tanh))
    assert _held(holding(config=LlamaConfig(rope_theta=1e4))) != _held(holding(config=LlamaConfig(rope_theta=5e5)))
    assert _held(holding(config=LlamaConfig(name_or_path="a"))) == _held(holding(config=LlamaConfig(name_or_path="b")))
