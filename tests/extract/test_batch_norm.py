"""A batch norm's running variance is drawn positive (validation copies and the problem's own inputs): drawn
like a bias it was negative half the time, the output NaN, and every batch norm failed validation (CPU)."""

from __future__ import annotations

import torch
from torch import nn

from solbench.extract import blocks
from solbench.extract.built import BuiltModel


class _Projected(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)
        self.bn = nn.BatchNorm1d(16)

    def forward(self, x):
        return self.bn(self.proj(x).transpose(1, 2)).transpose(1, 2)


def test_batch_norm_validates_and_its_problem_draws_a_positive_variance():
    with torch.device("meta"):
        module = _Projected().eval()

    def make_call(axes, dtype):
        return (torch.randn(axes["batch_size"], axes["seq_len"], 16, dtype=dtype),), {}

    built = BuiltModel("test/batch-norm", module, "module", make_call, {"batch_size": (2, 3, 2), "seq_len": (8, 12, 16)},
                       {"batch_size": (1,), "seq_len": (64,)})
    result = blocks.extract_blocks(built, torch.bfloat16)
    assert result.validations and all(v.passed for v in result.validations), [v.message for v in result.validations]
    norm = next(d for d in result.drafts if d.op_type == "batch_norm1d")
    namespace: dict = {}
    exec(compile(norm.reference(), norm.name, "exec"), namespace)
    inputs = namespace["get_inputs"]({"batch_size": 2, "seq_len": 8}, "cpu")
    assert (inputs["running_var"] > 0).all()
    assert not torch.isnan(namespace["run"](**inputs)).any()
