"""Every operator of the new architectures is priced, by hand-checked counts; an unknown one is an error.

Convolutions (all dims, transposed, depthwise), group norm, interpolation, pooling, cumsum and FFT:
the FLOPs the analyser gives are checked against counts derived here from the shapes. An operator the
analyser has no cost for gives no bound, names the operator, and `solbench sol` says so in one line.
"""

from __future__ import annotations

import json
import math

import pytest

from solbench.cli import main
from solbench.sol.analyser import analyse, sol_time_ms
from solbench.sol.hardware import load_spec
from solbench.sol.record import sol_record
from tests.sol.conftest import make_definition

B = 2


def _cost(inputs, outputs, body: str, header: str = "import torch\nimport torch.nn.functional as F\n"):
    definition = make_definition(inputs, outputs, header + "def run(" + ", ".join(inputs) + "):\n    " + body + "\n",
                                 {"B": B})
    cost = analyse(definition, {})
    assert cost.method == "meta" and not cost.unknown_ops, cost.unknown_ops
    return cost


def _split_radix(n: int) -> float:
    return 4 * n * math.log2(n) - 6 * n + 8


@pytest.mark.parametrize("body, x, w, y, flops", [
    ("return F.conv2d(x, w, padding=1)", ["B", 64, 32, 32], [128, 64, 3, 3], ["B", 128, 32, 32],
     2 * B * 128 * 32 * 32 * 64 * 9),
    ("return F.conv_transpose2d(x, w, stride=2, padding=1)", ["B", 64, 16, 16], [64, 32, 4, 4], ["B", 32, 32, 32],
     2 * B * 64 * 16 * 16 * 32 * 16),  # every input element meets C_out x k x k weights
    ("return F.conv1d(x, w, padding=3, groups=256)", ["B", 256, 128], [256, 1, 4], ["B", 256, 131],
     2 * B * 256 * 131 * 4),  # depthwise: one input channel per output channel
    ("return F.conv3d(x, w, padding=1)", ["B", 8, 4, 16, 16], [16, 8, 3, 3, 3], ["B", 16, 4, 16, 16],
     2 * B * 16 * 4 * 16 * 16 * 8 * 27),
])
def test_convolutions_are_matmul_work(body, x, w, y, flops):
    cost = _cost({"x": (x, "bfloat16"), "w": (w, "bfloat16")}, {"y": (y, "bfloat16")}, body)
    assert cost.flops_matmul == {"bfloat16": flops}
    assert cost.bytes_min == 2 * (math.prod([B, *x[1:]]) + math.prod(w) + math.prod([B, *y[1:]]))


def test_group_norm_interpolation_pooling_cumsum():
    image = ["B", 64, 32, 32]
    n = B * 64 * 32 * 32
    norm = _cost({"x": (image, "float32"), "g": ([64], "float32"), "b": ([64], "float32")},
                 {"y": (image, "float32")}, "return F.group_norm(x, 32, g, b, 1e-6)")
    assert norm.flops_other == 5 * n
    assert norm.bytes_min == 4 * (2 * n + 128)
    bilinear = _cost({"x": (["B", 64, 16, 16], "float32")}, {"y": (image, "float32")},
                     "return F.interpolate(x, scale_factor=2.0, mode='bilinear')")
    assert bilinear.flops_other == 4 * n  # four taps per output element
    nearest = _cost({"x": (["B", 64, 16, 16], "float32")}, {"y": (image, "float32")},
                    "return F.interpolate(x, scale_factor=2.0, mode='nearest')")
    assert nearest.flops_other == 0 and nearest.bytes_min == 4 * (n // 4 + n)  # data movement only
    pool = _cost({"x": (image, "float32")}, {"y": (["B", 64, 16, 16], "float32")}, "return F.max_pool2d(x, 3, 2, 1)")
    assert pool.flops_other == 9 * n // 4  # a 3 x 3 window per output element
    scan = _cost({"x": (["B", 4096], "float32")}, {"y": (["B", 4096], "float32")}, "return torch.cumsum(x, -1)")
    assert scan.flops_other == B * 4096


def test_fft_at_the_split_radix_count():
    cost = _cost({"x": (["B", 1024], "float32")}, {"y": (["B", 1024], "float32")},
                 "return torch.fft.irfft(torch.fft.rfft(x, n=2048), n=2048)[..., :1024]")
    assert cost.flops_other == pytest.approx(2 * B * 0.5 * _split_radix(2048))  # real: half a complex FFT
    square = _cost({"x": (["B", 64, 64], "float32")}, {"y": (["B", 64, 64], "float32")},
                   "return torch.fft.fft2(x).abs()")
    rows_then_columns = B * 2 * 64 * _split_radix(64)
    assert square.flops_other == pytest.approx(rows_then_columns + B * 64 * 64)  # torch runs it complex; + abs


def test_unknown_operator_means_no_bound(tmp_path, capsys):
    definition = make_definition({"x": (["B", 8, 8], "float32")}, {"y": (["B", 8, 8], "float32")},
                                 "import torch\ndef run(x):\n    return torch.linalg.cholesky(x)\n", {"B": B})
    cost = analyse(definition, {})
    assert cost.unpriced_ops == ["linalg_cholesky_ex (x1)"]
    hw = load_spec("H100")
    record = sol_record(cost, sol_time_ms(cost, hw), hw, 0.01, 0.02)
    assert record["t_sol_ms"] is None and record["score"] is None and "linalg_cholesky_ex" in record["unavailable"]
    problem = tmp_path / "chol"
    problem.mkdir()
    data = definition.to_dict()
    data["axes"] = {"B": {"type": "var"}}
    (problem / "definition.json").write_text(json.dumps(data))
    (problem / "workload.jsonl").write_text(json.dumps({"uuid": "w1", "axes": {"B": 2}}) + "\n")
    assert main(["sol", str(problem), "--hw", "H100", "--json", "--no-cache"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out.splitlines()[0])["strict"]["t_sol_ms"] is None
    assert len(err.strip().splitlines()) == 1 and "linalg_cholesky_ex" in err


def test_unchecked_indexing_is_priced_as_indexing():
    """Traced backwards hold `_unsafe_index` / `_unsafe_index_put` (SAM's relative-position attention): the
    same gather and scatter as `index` / `index_put`, priced alike, never unknown."""
    inputs = {"t": ([64, 16], "float32"), "i": (["B", 8], "int64"), "v": (["B", 8, 16], "float32")}
    outputs = {"y": ([64, 16], "float32")}
    checked = _cost(inputs, outputs, "return torch.ops.aten.index_put(t, [i], v * t[i], True)")
    unchecked = _cost(inputs, outputs,
                      "return torch.ops.aten._unsafe_index_put(t, [i], v * torch.ops.aten._unsafe_index(t, [i]), True)")
    assert (unchecked.flops_other, unchecked.bytes_min) == (checked.flops_other, checked.bytes_min)
    assert checked.flops_other > 0


LSTM_STEP = '''import torch

def get_inputs(axes_and_scalars, device):
    h = 64
    return {"w_ih": torch.randn(4 * h, h, dtype=torch.bfloat16, device=device),
            "w_hh": torch.randn(4 * h, h, dtype=torch.bfloat16, device=device),
            "b_ih": torch.randn(4 * h, dtype=torch.bfloat16, device=device),
            "b_hh": torch.randn(4 * h, dtype=torch.bfloat16, device=device),
            "x": torch.randn(axes_and_scalars["B"], 1, h, dtype=torch.bfloat16, device=device)}

def run(w_ih, w_hh, b_ih, b_hh, x):
    state = torch.zeros(1, x.shape[0], 64, dtype=x.dtype, device=x.device)
    out, _, _ = torch.lstm(x, [state, state], [w_ih, w_hh, b_ih, b_hh], True, 1, 0.0, False, False, True)
    return out
'''


def test_an_lstm_step_whose_weights_the_inputs_hand_over_real_is_priced():
    """A transducer's prediction network (Parakeet-TDT): the custom inputs keep its small weights real on
    CPU, and torch.lstm checks its tensors' devices before dispatch, so the trace failed ("input at meta,
    hidden at cpu") and the problem had no bound. The real tensors now go to meta as the inputs they are."""
    from solbench.spec.definition import Definition

    h = 64
    definition = Definition.from_dict({
        "name": "lstm_step", "axes": {"B": {"type": "const", "value": B}},
        "inputs": {"w_ih": {"shape": [4 * h, h], "dtype": "bfloat16"}, "w_hh": {"shape": [4 * h, h], "dtype": "bfloat16"},
                   "b_ih": {"shape": [4 * h], "dtype": "bfloat16"}, "b_hh": {"shape": [4 * h], "dtype": "bfloat16"},
                   "x": {"shape": ["B", 1, h], "dtype": "bfloat16"}},
        "outputs": {"out": {"shape": ["B", 1, h], "dtype": "bfloat16"}},
        "reference": LSTM_STEP, "custom_inputs_entrypoint": "get_inputs"})
    cost = analyse(definition, {})
    assert cost.method == "meta" and not cost.unknown_ops, (cost.method, cost.unknown_ops)
    assert sum(cost.flops_matmul.values()) == 2 * 2 * B * h * 4 * h  # input and hidden projections, 4 gates
    assert cost.bytes_min >= 2 * 2 * 4 * h * h  # both weights read
