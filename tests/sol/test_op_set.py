"""The core-aten op-set recorder and benchmarks/extract_coverage.py's containment, on hand-made problems.

A fused attention call and a hand-written softmax attention must record the same op set (one
decomposition level); the benchmark must match an official problem to extracted problems of the same
model only, and tell "contained" from "same boundary".
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from solbench.sol.op_set import record_op_set, record_op_sets
from tests.sol.conftest import make_definition

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "extract_coverage.py"
QKV = {"q": (["B", 4, 16, 8], "float32"), "k": (["B", 4, 16, 8], "float32"), "v": (["B", 4, 16, 8], "float32")}
OUT = {"o": (["B", 4, 16, 8], "float32")}


def _ops(reference: str, inputs=QKV, outputs=OUT) -> frozenset[str]:
    return record_op_set(make_definition(inputs, outputs, reference, {"B": 2}), {})


def test_fused_and_hand_written_attention_record_alike():
    fused = _ops("import torch.nn.functional as F\n"
                 "def run(q, k, v):\n    return F.scaled_dot_product_attention(q, k, v)\n")
    by_hand = _ops("import torch\n"
                   "def run(q, k, v):\n"
                   "    p = torch.softmax((q @ k.transpose(-1, -2)) * 8 ** -0.5, dim=-1)\n"
                   "    return p @ v\n")
    assert fused == by_hand
    assert {"mm", "amax", "exp", "sum", "div", "mul"} <= fused and not {"view", "expand", "clone", "bmm"} & fused
    fused = _ops("import torch.nn.functional as F\ndef run(q, k, v):\n    return F.layer_norm(q, (8,))\n")
    by_hand = _ops("import torch\ndef run(q, k, v):\n"
                   "    return (q - q.mean(-1, keepdim=True)) * torch.rsqrt(q.var(-1, keepdim=True, unbiased=False) + 1e-5)\n")
    assert fused == by_hand == {"mean", "sub", "add", "rsqrt", "mul"}


X = {"x": (["B", 16, 32], "float32"), "w": ([64, 32], "float32"), "i": (["B"], "int64")}
OUT_X = {"o": (["B", 16, 64], "float32")}
SAME = [  # pairs of one computation written two ways: each pair records one op set
    ("import torch\ndef run(x, w, i):\n    return torch.bmm(x, w.T.expand(x.shape[0], 32, 64))\n",
     "import torch.nn.functional as F\ndef run(x, w, i):\n    return F.linear(x, w)\n"),  # batched or not: mm
    ("import torch\ndef run(x, w, i):\n    return x.index_add(0, i, x)\n",
     "import torch\ndef run(x, w, i):\n    return x.scatter_add(0, i[:, None, None].expand_as(x), x)\n"),
    ("import torch\ndef run(x, w, i):\n    e = torch.exp(x - x.amax(-1, keepdim=True))\n    return e / e.sum(-1, keepdim=True)\n",
     "import torch\ndef run(x, w, i):\n    return torch.softmax(x, -1)\n"),
    ("import torch\ndef run(x, w, i):\n    return x.repeat(2, 1, 1) / 4.0\n",
     "import torch\ndef run(x, w, i):\n    return 0.25 * x.expand(2, -1, -1, -1).contiguous()\n"),
    ("import torch.nn.functional as F\ndef run(x, w, i):\n    return F.embedding(i, w)\n",
     "def run(x, w, i):\n    return w[i]\n"),
    ("import torch\ndef run(x, w, i):\n    d = x - x.mean(-1, keepdim=True)\n"
     "    return d * torch.rsqrt(d.pow(2).mean(-1, keepdim=True) + 1e-5)\n",  # a layer norm by hand
     "import torch.nn.functional as F\ndef run(x, w, i):\n    return F.layer_norm(x, (32,)) / 2.0\n"),
    ("def run(x, w, i):\n    return (x > 0) & (x.pow(3) <= 1)\n",  # comparisons either way; a cube
     "def run(x, w, i):\n    return (0 < x) & (x * x * x < 1)\n"),
    ("import torch.nn.functional as F\ndef run(x, w, i):\n    return F.conv1d(F.pad(x, (2, 0)), w[:16, :16, None])\n",
     "import torch.nn.functional as F\ndef run(x, w, i):\n    return F.conv1d(x, w[:16, :16, None], padding=2)\n"),
    ("import torch\ndef run(x, w, i):\n    return x.max(-1).values\n",
     "import torch\ndef run(x, w, i):\n    return x.amax(-1)\n"),
]


def test_equal_computations_written_apart_record_alike():
    for first, second in SAME:
        assert _ops(first, X, OUT_X) == _ops(second, X, OUT_X), (first, second)
    assert _ops(SAME[0][1], X, OUT_X) == {"mm"}
    assert _ops("import torch\ndef run(x, w, i):\n    return torch.sqrt(x)\n", X, OUT_X) == {"rsqrt"}
    assert _ops("import torch\ndef run(x, w, i):\n    return x / x.sum()\n", X, OUT_X) == {"sum", "div"}


def test_tables_and_masks_built_from_shapes_are_not_work_on_data():
    """A causal mask and a RoPE table built inline from `arange` are constants: recorded in `all`, not in
    `data`; what is done to q, k and v is in both."""
    inline = ("import torch\ndef run(q, k, v):\n    pos = torch.arange(q.shape[-2], device=q.device)\n"
              "    inv = 1.0 / (10000.0 ** (torch.arange(0, 8, 2, device=q.device).float() / 8))\n"
              "    ang = pos[:, None].float() * inv\n    emb = torch.cat((ang, ang), -1)\n"
              "    q = q * emb.cos() + q * emb.sin()\n"
              "    s = (q @ k.transpose(-1, -2)).masked_fill(pos[None, :] > pos[:, None], float('-inf'))\n"
              "    return torch.softmax(s, -1) @ v\n")
    sets = record_op_sets(make_definition(QKV, OUT, inline, {"B": 2}), {})
    assert {"arange", "cos", "sin", "pow", "reciprocal", "compare"} <= sets.all
    assert not {"arange", "cos", "sin", "pow", "reciprocal", "compare", "cat"} & sets.data
    assert {"mm", "mul", "add", "exp", "where"} <= sets.data
    fused = "import torch.nn.functional as F\ndef run(q, k, v):\n    return F.scaled_dot_product_attention(q, k, v)\n"
    fused_sets = record_op_sets(make_definition(QKV, OUT, fused, {"B": 2}), {})
    assert fused_sets.data == fused_sets.all  # inside the fused call too (the tracer is quiet there)


def _problem(root: Path, name: str, reference: str, models: list[str], official: bool) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    data = make_definition({"x": (["B", 32], "float32"), "w": ([32, 32], "float32")}, {"y": (["B", 32], "float32")},
                           reference, {"B": 4}, name=name.split("/")[-1]).to_dict()
    data["axes"] = {"B": {"type": "var"}}
    if official:
        data["hf_id"] = models[0]
    else:
        data["solbench"] = {"models": [{"hf_id": m} for m in models]}
    (folder / "definition.json").write_text(json.dumps(data))
    (folder / "workload.jsonl").write_text(json.dumps({"uuid": "w", "axes": {"B": 4}}) + "\n")


def _coverage_script():
    spec = importlib.util.spec_from_file_location("extract_coverage", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_containment_by_model(tmp_path, capsys):
    gelu = "import torch.nn.functional as F\ndef run(x, w):\n    return F.gelu(x @ w)\n"
    block = "import torch.nn.functional as F\ndef run(x, w):\n    return x + F.gelu(F.layer_norm(x, (32,)) @ w)\n"
    official, extracted = tmp_path / "official", tmp_path / "hf"
    _problem(official, "L1/001_gelu_linear", gelu, ["org/model-a"], True)  # inside a's block
    _problem(official, "L1/002_block", block, ["org/model-a"], True)  # a's block itself
    _problem(official, "L1/003_gelu_backward", gelu, ["org/model-a"], True)  # no backward extracted
    _problem(official, "L1/004_gelu_b", gelu, ["org/model-b"], True)  # b's problem is only a matmul
    _problem(official, "L1/005_unknown", gelu, ["org/model-c"], True)  # c: nothing extracted
    _problem(extracted, "block_a", block, ["org/model-z", "Org/Model-A"], False)
    _problem(extracted, "matmul_b", "def run(x, w):\n    return x @ w\n", ["org/model-b"], False)
    families = tmp_path / "families.md"
    families.write_text("| hf_id | family |\n|---|---|\n| org/model-a | LLM |\n| org/model-b | MoE |\n")
    args = ["--official", str(official), "--extracted", str(extracted), "--families", str(families), "--jobs", "1",
            "--details", "--save", str(tmp_path / "v.json"), "--cache", str(tmp_path / "cache.json")]
    assert _coverage_script().main(args) == 0
    stdout = capsys.readouterr().out
    assert len(json.loads((tmp_path / "cache.json").read_text())) == 7  # one op set per problem content
    assert _coverage_script().main(args) == 0  # from the cache: the same verdicts
    again = capsys.readouterr().out
    assert [x for x in again.splitlines() if "|" in x or x.startswith("  ")] == \
        [x for x in stdout.splitlines() if "|" in x or x.startswith("  ")]
    verdicts = {v["problem"]: v for v in json.loads((tmp_path / "v.json").read_text())}
    assert verdicts["001_gelu_linear"]["contained_in"] == ["block_a"] and not verdicts["001_gelu_linear"]["same_boundary"]
    assert verdicts["002_block"]["same_boundary"] == ["block_a"]
    assert not verdicts["003_gelu_backward"]["contained_in"] and "backward" in verdicts["003_gelu_backward"]["reason"]
    assert not verdicts["004_gelu_b"]["contained_in"] and "lacks" in verdicts["004_gelu_b"]["reason"]
    assert verdicts["005_unknown"]["reason"] == "no extracted problem of this model"
    assert "| dense LLM | 3 | 3 | 2 | 1 | 0 of 0 |" in stdout and "| MoE | 1 | 1 | 0 | 0 |" in stdout
    assert "| unknown | 1 | 0 | 0 | 0 |" in stdout and "contained: 2 of 5" in stdout


def test_with_earlier_verdicts_counts_what_either_run_contains(tmp_path, capsys):
    gelu = "import torch.nn.functional as F\ndef run(x, w):\n    return F.gelu(x @ w)\n"
    official, first, second = tmp_path / "official", tmp_path / "first", tmp_path / "second"
    _problem(official, "L1/001_gelu", gelu, ["org/model-a"], True)
    _problem(official, "L1/002_matmul", "def run(x, w):\n    return x @ w\n", ["org/model-b"], True)
    _problem(first, "gelu_a", gelu, ["org/model-a"], False)  # the earlier run found 001 only
    _problem(second, "matmul_b", "def run(x, w):\n    return x @ w\n", ["org/model-b"], False)  # this one 002 only
    common = ["--official", str(official), "--jobs", "1", "--cache", str(tmp_path / "cache.json")]
    assert _coverage_script().main([*common, "--extracted", str(first), "--save", str(tmp_path / "first.json")]) == 0
    assert _coverage_script().main([*common, "--extracted", str(second)]) == 0
    assert "contained: 1 of 2" in capsys.readouterr().out.splitlines()[-1]
    assert _coverage_script().main([*common, "--extracted", str(second), "--with", str(tmp_path / "first.json"),
                                    "--save", str(tmp_path / "both.json")]) == 0
    assert "contained: 2 of 2" in capsys.readouterr().out
    both = {v["problem"]: v["contained_in"] for v in json.loads((tmp_path / "both.json").read_text())}
    assert both == {"001_gelu": ["gelu_a"], "002_matmul": ["matmul_b"]}


def test_one_hot_records_alike_whether_its_ids_are_given_or_computed():
    """`F.one_hot` dispatches a range check and a scatter on real ids (a routing input a problem's
    get_inputs gives the trace) and a comparison with `arange` on meta ids (a top-k the trace computed):
    recorded whole, a fused layer and an experts problem spell the same dispatch alike."""
    import torch

    from solbench.sol.op_set import OpSetRecorder

    def record(ids):
        recorder = OpSetRecorder()
        with recorder:
            torch.nn.functional.one_hot(ids, num_classes=9)
        return recorder.ops

    ids = torch.randint(0, 8, (5, 2))
    assert record(ids) == record(ids.to("meta")) == {"one_hot"}
