"""One model's blocks on forked workers (`block_pool`): the same drafts, validations and reports as one
process, in the same order; a worker that fails or dies leaves its block to the caller."""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

from solbench.extract import block_pool, blocks, far_calls


def _pid(index: int) -> tuple[int, int]:
    return index, os.getpid()


def test_workers_are_other_processes_and_results_come_back_by_index():
    with block_pool.ahead(_pid, [0, 1, 2, 3], 2) as pool:
        taken = [pool.take(i) for i in (3, 0, 2, 1)]  # any order: each waits for its own
        assert pool.take(7) is None  # never sent: the caller's
    assert [t[0] for t in taken] == [3, 0, 2, 1]
    assert {t[1] for t in taken}.isdisjoint({os.getpid()})


def _dies_or_raises(index: int) -> int:
    if index == 1:
        os._exit(3)  # as an out-of-memory kill would end it
    if index == 2:
        raise RuntimeError("a block that fails in a worker")
    return index * 10


def test_a_failed_or_dead_worker_leaves_its_block_to_the_caller():
    with block_pool.ahead(_dies_or_raises, [0, 1, 2, 3, 4], 2) as pool:
        taken = {i: pool.take(i) for i in range(5)}
    assert taken[1] is None and taken[2] is None  # run by the caller, who meets the error itself
    assert {i: taken[i] for i in (0, 3, 4)} == {0: 0, 3: 30, 4: 40}  # the other worker went on


_STATE: list[int] = []
_CALLER = os.getpid()


def _appends(index: int) -> tuple[int, int, list[int]]:
    """Item `index`: where it ran, and the state it found (item 0 changes it, as a recording may)."""
    if index == 3 and os.getpid() != _CALLER:
        raise RuntimeError("a recording that fails in a worker")
    found = list(_STATE)
    _STATE.append(index)
    return index, os.getpid(), found


def test_each_runs_item_0_here_and_the_rest_on_workers_from_the_callers_state():
    """A model's recordings at its capture sizes (`blocks.extract_blocks`): results in order; every item
    starts from the state the caller had; an item that failed in a worker is run here afterwards."""
    _STATE.clear()
    with block_pool.processes(2):
        results = block_pool.each(_appends, 4)
    assert [r[0] for r in results] == [0, 1, 2, 3]
    assert results[0][1] == os.getpid() and {results[1][1], results[2][1]}.isdisjoint({os.getpid()})
    assert results[1][2] == [] and results[2][2] == []  # item 0's change stayed in this process
    assert results[3][1] == os.getpid() and results[3][2] == [0]  # failed in its worker, run here after 0
    _STATE.clear()
    assert [r[1] for r in block_pool.each(lambda i: _appends(i) if i < 3 else (i, os.getpid(), []), 4)] == \
        [os.getpid()] * 4  # outside `processes`: all here, one after the other


def test_the_worker_count_is_bounded_by_the_memory_available():
    gb = 1 << 30
    assert block_pool.usable(4, 8 * gb, available_bytes=17 * gb) == 2
    assert block_pool.usable(4, 8 * gb, available_bytes=gb) == 1
    assert block_pool.usable(2, 8 * gb, available_bytes=64 * gb) == 2
    assert block_pool.usable(1, 8 * gb, available_bytes=64 * gb) == 1
    with block_pool.processes(3):
        assert 1 <= block_pool.wanted(10**6) <= 3
        huge = block_pool.wanted(10**15)  # a petabyte of copies: no machine holds two
    assert huge == 1 and block_pool.wanted(10**6) == 1  # outside `processes`: one process


def _any_memory(monkeypatch) -> None:
    """This machine's free memory must not make a run one process: what is tested is the same files."""
    monkeypatch.setattr(block_pool, "BYTES_PER_WORKER", 1)
    monkeypatch.setattr(block_pool, "BYTES_PER_PARAMETER", 0)


def _report(result: blocks.BlocksResult) -> list:
    return [[(d.name, d.code, d.workload_points, d.hints.get("module_paths")) for d in result.drafts],
            [(v.problem, v.passed, v.exact, v.message) for v in result.validations],
            [(n.path, n.class_name, n.reason) for n in result.not_emitted], result.notes]


def test_a_model_on_two_workers_gives_what_one_process_gives(monkeypatch):
    """A tiny SD3 transformer: its joint blocks' far calls do not scale from their own calls, so the far
    recording is made before the workers fork, and every block is found by a worker."""
    pytest.importorskip("diffusers")
    from solbench.extract.build_diffusers import build_component

    config = dict(sample_size=32, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=16,
                  num_attention_heads=2, joint_attention_dim=32, caption_projection_dim=32,
                  pooled_projection_dim=24, out_channels=4)
    (built,) = build_component("tiny/sd3", "transformer", "SD3Transformer2DModel", config, torch.bfloat16)
    recorded = []
    real_record = far_calls.LargeCalls.record
    monkeypatch.setattr(far_calls.LargeCalls, "record", lambda self: recorded.append(1) or real_record(self))
    alone = blocks.extract_blocks(built, torch.bfloat16)
    assert alone.ahead == 0
    _any_memory(monkeypatch)
    with block_pool.processes(2):
        spread = blocks.extract_blocks(built, torch.bfloat16)
    assert recorded, "no block read the far recording: this test no longer covers it"
    assert spread.ahead == len(spread.drafts) > 5
    assert _report(spread) == _report(alone)
    assert all(v.passed for v in spread.validations)


class _PairLoop(nn.Module):
    """A Python loop over pairs of tokens: 3 pairs at the traced size, 2 at the next, so it may refuse the far
    recording (and does: its graph grows with the size)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x):
        return torch.cat([torch.tanh(self.proj(pair)) for pair in x.split(2, dim=1)], dim=1)


class _Triangle(nn.Module):
    """A loop block, then a norm over every prefix of the sequence: s(s+1)/2 rows, a size no line or product
    of the model's axes gives, so the norm's far calls can only come from the model's far recording."""

    def __init__(self):
        super().__init__()
        self.embed, self.loop, self.norm = nn.Linear(6, 8), _PairLoop(), nn.LayerNorm(8)
        self.mlp = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 8))

    def forward(self, x):
        h = self.loop(self.embed(x))
        prefixes = torch.cat([h[:, : i + 1] for i in range(h.shape[1])], dim=1)
        return self.mlp(h), self.norm(prefixes)


def test_blocks_that_may_refuse_or_read_the_far_recording_stay_for_their_turn(monkeypatch):
    """As one process does: the loop block refuses the far recording at its turn, so the norm that would read
    it (next in line) never has it made; both run here at their turn, the others on the workers. Within a run
    over several models too, where a block's reuse key would read the recording."""
    from solbench.extract import reuse
    from solbench.extract.built import BuiltModel

    model = _Triangle().eval().to("meta")
    built = BuiltModel("test/triangle", model, "module",
                       lambda axes, dtype: ((torch.randn(axes["batch"], axes["seq"], 6, dtype=dtype),), {}),
                       {"batch": (4, 2, 3), "seq": (6, 4, 8)}, {"batch": (1, 2), "seq": (8, 32)})
    with reuse.session():
        alone = blocks.extract_blocks(built, torch.bfloat16)
    _any_memory(monkeypatch)
    here, events = os.getpid(), []
    real_run, real_refuse, real_record = (blocks._validated_forward, far_calls.LargeCalls.refuse,
                                          far_calls.LargeCalls.record)
    monkeypatch.setattr(blocks, "_validated_forward", lambda built, block, *a: (
        events.append(("here", block.path)) if os.getpid() == here else None) or real_run(built, block, *a))
    monkeypatch.setattr(far_calls.LargeCalls, "refuse", lambda self, why: (
        events.append(("refused", why)) if os.getpid() == here else None) or real_refuse(self, why))
    monkeypatch.setattr(far_calls.LargeCalls, "record", lambda self: events.append(("recorded",)) or real_record(self))
    with reuse.session(), block_pool.processes(2):
        spread = blocks.extract_blocks(built, torch.bfloat16)
    assert _report(spread) == _report(alone)
    assert events == [("here", "loop"), ("refused", "a block of the model unrolls a loop over a size"),
                      ("here", "norm")], events
    assert spread.ahead == 3  # the MLP's two layers and the embedding, from the workers
    assert [n.path for n in spread.not_emitted if "no workload" in n.reason] == ["loop"]


def test_the_cli_with_jobs_writes_the_same_files_for_one_module(tmp_path, monkeypatch):
    """`extract --module ... -j 2`: the module's blocks on two workers, the same files as `-j 1`."""
    import argparse

    from solbench.cli import extract as extract_cli

    _any_memory(monkeypatch)
    found = []
    real = blocks.extract_blocks
    monkeypatch.setattr(blocks, "extract_blocks", lambda *a, **k: found.append(real(*a, **k)) or found[-1])
    trees = {}
    for jobs in ("1", "2"):
        parser = argparse.ArgumentParser()
        extract_cli.add_arguments(parser)
        out = tmp_path / f"j{jobs}"
        args = parser.parse_args(["--module", "tests.extract.tiny_modules:GatedBlock", "--config-kw", "hidden=64",
                                  "inner=96", "--input", "x=2,seq:16|24|40,64", "--input", "scale=1:float32",
                                  "--model", "me/gated", "-o", str(out), "-j", jobs])
        assert extract_cli.handle(args) == 0
        trees[jobs] = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    assert [r.ahead for r in found] == [0, len(found[1].drafts)] and found[1].ahead >= 2
    assert trees["2"] == trees["1"] and len(trees["1"]) >= 4


def test_a_templated_models_validation_on_two_workers_is_one_process_s(monkeypatch):
    """The family templates' drafts of a MoE model (shared modules: a layer and its attention, MLP and router),
    validated on two workers: the same verdicts, errors and messages, float32 and bfloat16, as one process."""
    from solbench.extract import configs
    from solbench.extract.families import drafts_for
    from solbench.extract.trace import trace
    from solbench.extract.validate import Validator

    traced = trace(configs.resolve("deepseek-ai/DeepSeek-V2-Lite", use_hub=False))
    drafts = drafts_for(traced).drafts
    assert len(drafts) > 4

    def verdicts(results):
        return [(v.problem, v.passed, v.exact, v.max_abs_error, v.message, v.reduced) for v in results]

    alone = verdicts(Validator(traced).validate_all(drafts))
    _any_memory(monkeypatch)
    taken = []
    real_take = block_pool.Ahead.take
    monkeypatch.setattr(block_pool.Ahead, "take", lambda self, i: taken.append(real_take(self, i)) or taken[-1])
    with block_pool.processes(2):
        spread = verdicts(Validator(traced).validate_all(drafts))
    assert spread == alone
    assert len(taken) == len([d for d in drafts]) + len([d for d in drafts if not d.op_type.endswith("_backward")])
    assert all(t is not None for t in taken)  # every comparison came from a worker
