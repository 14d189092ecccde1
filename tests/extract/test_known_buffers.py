"""Buffers a module computes from its config at build time keep their values (CPU): models are built on
meta, where a softcap of 50.0, a clamp bound of 1e10 or a causal mask would otherwise be drawn at random
(Gemma 3n's audio attention ran at a softcap near 0.1 and an all-false mask)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from solbench.extract import blocks, known
from solbench.extract.built import BuiltModel


class _Capped(nn.Module):
    def __init__(self, cap: float = 50.0, window: int = 6):
        super().__init__()
        self.proj = nn.Linear(16, 16)
        self.register_buffer("softcap", torch.tensor(cap).float(), persistent=False)
        self.register_buffer("scale", torch.rsqrt(torch.tensor(16.0)) * 2, persistent=False)
        self.register_buffer("mask", torch.tril(torch.ones(window, window, dtype=torch.bool)), persistent=False)
        self.register_buffer("bias", torch.full((window, window), float("-inf")).triu(1), persistent=False)
        self.register_buffer("running", torch.ones(16))  # persistent: a checkpoint's, drawn like a weight
        stale = torch.zeros(4)
        stale.normal_()  # written by a call that is not followed: its value is not known
        self.register_buffer("stale", stale, persistent=False)

    def forward(self, x):
        capped = torch.tanh(self.proj(x) * self.scale / self.softcap) * self.softcap
        scores = capped[:, :, :6] @ capped[:, :, :6].transpose(1, 2) + self.bias
        return scores.masked_fill(~self.mask[: x.shape[1], : x.shape[1]], 0.0), self.running * capped


def _built() -> nn.Module:
    with torch.device("meta"):
        return known.build(_Capped).eval()


def test_values_computed_at_build_are_kept_and_only_those():
    values = known.known_buffers(_built())
    assert set(values) == {"softcap", "scale", "mask", "bias"}, sorted(values)
    assert values["softcap"].item() == 50.0 and values["scale"].item() == 0.5
    assert torch.equal(values["mask"], torch.tril(torch.ones(6, 6, dtype=torch.bool)))


def test_a_problem_draws_no_value_the_config_fixes():
    module = _built()

    def make_call(axes, dtype):
        return (torch.randn(axes["batch_size"], 6, 16, dtype=dtype),), {}

    built = BuiltModel("test/capped", module, "module", make_call, {"batch_size": (2, 3, 4)}, {"batch_size": (1,)})
    result = blocks.extract_blocks(built, torch.bfloat16)
    draft = next(d for d in result.drafts if d.op_type == "_capped")
    assert all(v.passed for v in result.validations), [v.message for v in result.validations]
    namespace: dict = {}
    exec(compile(draft.reference(), draft.name, "exec"), namespace)
    inputs = namespace["get_inputs"]({"batch_size": 2}, "cpu")
    assert inputs["softcap"].item() == 50.0 and inputs["scale"].item() == 0.5
    assert torch.equal(inputs["mask"], torch.tril(torch.ones(6, 6, dtype=torch.bool)))
    assert torch.equal(inputs["bias"], torch.full((6, 6), float("-inf")).triu(1).to(inputs["bias"].dtype))
    assert "follows from the config" in next(a.description for a in draft.inputs if a.name == "softcap")
    scores, _ = namespace["run"](**inputs)
    assert scores.triu(1).eq(0).all() and scores.tril().ne(0).any()  # the causal mask, not a random one
    assert F.relu(inputs["running"]).sum() > 0  # the persistent buffer is still drawn
