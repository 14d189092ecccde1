"""What the recording keeps of each module call: its op count (`Call.ops`), from which whether a block's trace
grows with its size is read (the second export, which only counted graph nodes, runs only where the counts
disagree), and which of several calls is kept, whatever order a set gave them."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from solbench.extract import blocks, capture
from solbench.extract.built import BuiltModel
from solbench.extract.capture import axis_points, record_calls


class Scan(nn.Module):
    """A Python loop over the tokens: every trace unrolls it (Jamba's selective scan, in miniature)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        state = torch.zeros_like(x[:, 0])
        steps = []
        for t in range(x.shape[1]):
            state = torch.tanh(state + self.proj(x[:, t]))
            steps.append(state)
        return torch.stack(steps, dim=1)


class Chunks(nn.Module):
    """A split into fixed-size chunks, concatenated back: one call, a chunk count that follows the size."""

    def forward(self, x):
        return torch.cat([c * 2.0 for c in x.split(2, dim=1)], dim=1)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 8)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


class Body(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = Mlp()
        self.scan = Scan()
        self.chunks = Chunks()

    def forward(self, x):
        return self.chunks(self.scan(self.mlp(x)))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(6, 8)
        self.body = Body()

    def forward(self, x):
        return self.body(self.embed(x))


def _built() -> BuiltModel:
    return BuiltModel("test/growth", Model().eval().to("meta"), "module",
                      lambda axes, dtype: ((torch.randn(2, axes["seq"], 6, dtype=dtype),), {}),
                      {"seq": (4, 6, 8)}, {"seq": (4, 8, 16)})


def test_the_recording_counts_what_each_call_made():
    built = _built()
    small, large = (record_calls(built, {"seq": n}, torch.float32) for n in (4, 6))
    assert small["body.mlp"].ops == large["body.mlp"].ops == 3  # up, relu, down
    assert small["body.mlp.up"].ops == 1
    assert large["body.scan"].ops > small["body.scan"].ops  # the loop ran 6 times, not 4
    assert large["body.chunks"].ops == small["body.chunks"].ops + 2  # one more chunk, and its product
    assert small[""].ops == small["embed"].ops + small["body"].ops
    assert small["body"].ops == small["body.mlp"].ops + small["body.scan"].ops + small["body.chunks"].ops


def test_only_a_block_whose_counts_disagree_is_exported_a_second_time(monkeypatch):
    exported: list[tuple[str, tuple]] = []
    real_export = blocks._export

    def spy(block, call, dynamic):
        exported.append((block.path, tuple(call.leaves()[0].shape)))
        return real_export(block, call, dynamic)

    monkeypatch.setattr(blocks, "_export", spy)
    built = _built()
    result = blocks.extract_blocks(built, torch.float32, validate=False)
    second = tuple(record_calls(built, axis_points(built)[1], torch.float32)["body.mlp"].args[0].shape)
    by_path = {path: [shape for p, shape in exported if p == path] for path, _ in exported}
    assert second not in by_path["body.mlp"]  # equal counts: no export at the second capture size
    assert len(by_path["body.mlp"]) == 2  # traced, and past the model's largest sizes (code unchanged)
    assert by_path["body.scan"][1] == second  # counts disagree: the second export decides; it grows,
    assert len(by_path["body.scan"]) == 2  # so the loop is never unrolled past the largest sizes
    scan = next(d for d in result.drafts if d.name.startswith("scan_"))
    assert [p for p in scan.workload_points if p] == []  # its size is fixed where it was traced


class Table(nn.Module):
    def forward(self, x, kind: str):
        return x * (2.0 if kind == "full" else 3.0)


class PerKind(nn.Module):
    """Calls one module once per kind, in the order it is handed (a set's, in Olmo 3 and Gemma 3)."""

    def __init__(self, kinds: list[str]):
        super().__init__()
        self.kinds = kinds
        self.table = Table()

    def forward(self, x):
        return sum(self.table(x, kind) for kind in self.kinds)


def test_of_calls_apart_only_in_other_arguments_the_one_sorting_first_is_kept():
    kept = []
    for kinds in (["sliding", "full"], ["full", "sliding"]):
        model = nn.Sequential(nn.Linear(8, 8), PerKind(kinds)).eval().to("meta")
        built = BuiltModel("test/kinds", model, "module",
                           lambda axes, dtype: ((torch.randn(2, axes["seq"], 8, dtype=dtype),), {}), {"seq": (4, 6)},
                           {"seq": (4,)})
        call = record_calls(built, {"seq": 4}, torch.float32)["1.table"]
        kept.append((call.args[1], call.count, call.ops))
    assert kept == [("full", 2, 1), ("full", 2, 1)]


class ChecksAValue(nn.Module):
    """Reads a value unless its input is a traced (fake) tensor, as transformers' mask code does
    (`find_packed_sequence_indices` in Gemma 3n, Whisper, Nemotron-H): meta tensors have no value to read."""

    def __init__(self):
        super().__init__()
        self.mlp = Mlp()

    def forward(self, x):
        from torch._subclasses.fake_tensor import FakeTensor

        x = self.mlp(x)
        if not isinstance(x, FakeTensor) and bool((x == 0).all()):
            return x
        return x * 0.5


class SeesItsInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = Mlp()
        self.seen: list[type] = []

    def forward(self, x):
        self.seen.append(type(x))
        return self.mlp(x)


def _built_from(module: nn.Module) -> BuiltModel:
    return BuiltModel("test/values", module.eval().to("meta"), "module",
                      lambda axes, dtype: ((torch.randn(2, axes["seq"], 8, dtype=dtype),), {}),
                      {"seq": (4, 6, 8)}, {"seq": (4, 8, 16)})


def test_a_model_is_recorded_on_meta_tensors_where_they_run_it():
    from torch._subclasses.fake_tensor import FakeTensor

    built = _built_from(SeesItsInput())
    calls = record_calls(built, {"seq": 4}, torch.float32)
    assert built.module.seen and not any(issubclass(t, FakeTensor) for t in built.module.seen), built.module.seen
    assert calls["mlp"].ops == 3


def test_a_model_that_reads_a_value_is_recorded_on_fake_tensors_once():
    built = _built_from(ChecksAValue())
    with pytest.raises(RuntimeError, match="meta"):  # what meta tensors alone would give
        capture._record(built, {"seq": 4}, torch.float32, fake=False)
    calls = record_calls(built, {"seq": 4}, torch.float32)
    assert calls["mlp"].count == 1 and calls["mlp"].ops == 3  # nothing kept of the failed meta run
    assert tuple(calls[""].args[0].shape) == (2, 4, 8)


def test_meta_and_fake_tensors_record_the_same_calls():
    built = _built()
    on_meta, on_fake = (capture._record(built, {"seq": 6}, torch.float32, fake=fake) for fake in (False, True))
    assert on_meta.keys() == on_fake.keys()
    for path, call in on_meta.items():
        other = on_fake[path]
        assert [(tuple(x.shape), x.stride(), x.dtype) for x in call.leaves() if isinstance(x, torch.Tensor)] == \
            [(tuple(x.shape), x.stride(), x.dtype) for x in other.leaves() if isinstance(x, torch.Tensor)], path
        assert (call.ops, call.count) == (other.ops, other.count), path
