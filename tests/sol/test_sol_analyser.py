"""Analyser numbers for hand-checked cases; every expected value is computed by hand in the test."""

from __future__ import annotations

import pytest

from solbench.sol.analyser import SOLAR_OVERHEAD_MS, analyse, sol_time_ms
from solbench.sol.hardware import load_spec
from tests.sol.conftest import fp8_scaled_mm_definition

H100 = load_spec("H100_SXM")
GEMM_REF = "import torch\ndef run(A, B):\n    return torch.matmul(A, B.T)\n"


def test_gemm_fp16(definition_of):
    m, n, k = 128, 64, 256
    d = definition_of({"A": (["M", "K"], "float16"), "B": (["N", "K"], "float16")},
                      {"C": (["M", "N"], "float16")}, GEMM_REF, {"M": m, "N": n, "K": k})
    cost = analyse(d, {})
    assert cost.method == "meta"
    assert cost.flops_matmul == {"float16": 2 * m * n * k}  # 4,194,304
    assert cost.flops_other == 0
    assert cost.bytes_by_tensor == {"A": m * k * 2, "B": n * k * 2, "C": m * n * 2}
    assert cost.bytes_min == 114_688
    bound = sol_time_ms(cost, H100)
    assert bound.binding == "memory"
    assert bound.t_sol_ms == pytest.approx(114_688 / 3350e9 * 1e3)
    assert bound.t_tensor_ms == pytest.approx(4_194_304 / 989.4e12 * 1e3)
    assert bound.arithmetic_intensity == pytest.approx(4_194_304 / 114_688)


def test_gemm_compute_bound_and_solar(definition_of):
    m = n = k = 4096
    d = definition_of({"A": (["M", "K"], "bfloat16"), "B": (["N", "K"], "bfloat16")},
                      {"C": (["M", "N"], "bfloat16")}, GEMM_REF, {"M": m, "N": n, "K": k})
    strict = sol_time_ms(analyse(d, {}), H100)
    assert strict.binding == "tensor"
    assert strict.t_sol_ms == pytest.approx(2 * 4096**3 / 989.4e12 * 1e3)
    b200 = load_spec("B200")
    solar = sol_time_ms(analyse(d, {}, convention="solar"), b200)
    assert solar.t_sol_ms == pytest.approx(2 * 4096**3 / 1811.3e12 * 1e3 + SOLAR_OVERHEAD_MS)


def test_rmsnorm(definition_of):
    t, h = 64, 512
    ref = (
        "import torch\n"
        "def run(x, w, eps):\n"
        "    xf = x.to(torch.float32)\n"
        "    var = xf.pow(2).mean(-1, keepdim=True)\n"
        "    y = xf * torch.rsqrt(var + eps)\n"
        "    return w * y.to(torch.bfloat16)\n"
    )
    d = definition_of({"x": (["T", "H"], "bfloat16"), "w": (["H"], "bfloat16"), "eps": (None, "float32")},
                      {"out": (["T", "H"], "bfloat16")}, ref, {"T": t, "H": h})
    cost = analyse(d, {}, scalars={"eps": 1e-6})
    assert cost.flops_matmul == {}
    # pow (TH) + mean (TH read) + add eps (T) + rsqrt (T) + mul (TH) + mul by w (TH); casts are free
    assert cost.flops_other == 4 * t * h + 2 * t
    assert cost.bytes_min == (t * h + h + t * h) * 2
    assert sol_time_ms(cost, H100).binding == "memory"


def test_elementwise_fp32_strict_vs_solar(definition_of):
    n = 1 << 20
    ref = "def run(a, b):\n    return a * b\n"
    d = definition_of({"a": (["N"], "float32"), "b": (["N"], "float32")}, {"c": (["N"], "float32")}, ref,
                      {"N": n})
    strict = analyse(d, {})
    assert strict.bytes_min == 3 * n * 4 and strict.flops_other == n
    solar = analyse(d, {}, convention="solar")
    assert solar.bytes_min == 3 * n * 2  # one 2-byte width for the whole problem
    assert solar.flops_other == 0
    b200 = load_spec("B200")
    assert sol_time_ms(solar, b200).t_sol_ms == pytest.approx(3 * n * 2 / 7667e9 * 1e3 + SOLAR_OVERHEAD_MS)


def _attention_definition(definition_of, reference: str, b=2, h=4, length=128, dim=64):
    shape = ["B", "H", "L", "D"]
    return definition_of({"q": (shape, "bfloat16"), "k": (shape, "bfloat16"), "v": (shape, "bfloat16")},
                         {"o": (shape, "bfloat16")}, reference, {"B": b, "H": h, "L": length, "D": dim})


def test_causal_sdpa(definition_of):
    b, h, length, dim = 2, 4, 128, 64
    ref = ("import torch.nn.functional as F\n"
           "def run(q, k, v):\n    return F.scaled_dot_product_attention(q, k, v, is_causal=True)\n")
    d = _attention_definition(definition_of, ref)
    full = 4 * b * h * length * length * dim  # QK^T and PV, 2 FLOPs per MAC each
    causal = full * (length * (length + 1) / 2) / length**2
    assert analyse(d, {}).flops_matmul["bfloat16"] == pytest.approx(causal)
    assert analyse(d, {}, convention="solar").flops_matmul["bfloat16"] == pytest.approx(full)
    assert analyse(d, {}).bytes_min == 4 * b * h * length * dim * 2


def test_causal_manual_mask(definition_of):
    b, h, length, dim = 2, 4, 128, 64
    ref = (
        "import torch\n"
        "def run(q, k, v):\n"
        "    s = torch.matmul(q, k.transpose(-1, -2)) / 8.0\n"
        "    mask = torch.triu(torch.ones(q.shape[-2], q.shape[-2], device=q.device, dtype=torch.bool), diagonal=1)\n"
        "    s = s.masked_fill(mask, float('-inf'))\n"
        "    p = torch.softmax(s.float(), dim=-1).to(q.dtype)\n"
        "    return torch.matmul(p, v)\n"
    )
    d = _attention_definition(definition_of, ref)
    full = 4 * b * h * length * length * dim
    assert analyse(d, {}).flops_matmul["bfloat16"] == pytest.approx(full * (length + 1) / (2 * length))
    assert analyse(d, {}, convention="solar").flops_matmul["bfloat16"] == pytest.approx(full)


def test_sliding_window_mask(definition_of):
    length, window = 64, 8
    ref = (
        "import torch\n"
        "def run(q, k, v):\n"
        f"    keep = torch.tril(torch.ones({length}, {length}), 0) * torch.triu(torch.ones({length}, {length}), -{window - 1})\n"
        "    s = (q @ k.transpose(-1, -2)).masked_fill(keep == 0, -1e9)\n"
        "    return torch.softmax(s, -1) @ v\n"
    )
    d = _attention_definition(definition_of, ref, b=1, h=1, length=length, dim=16)
    kept = sum(min(i + 1, window) for i in range(length))  # 8 per row once the window is full
    full = 4 * length * length * 16
    assert analyse(d, {}).flops_matmul["bfloat16"] == pytest.approx(full * kept / length**2)


def test_fp8_scaled_mm(definition_of):
    m, n, k = 128, 256, 512
    d = fp8_scaled_mm_definition(m, n, k)
    cost = analyse(d, {})
    assert cost.flops_matmul == {"float8_e4m3fn": 2 * m * n * k}
    assert cost.bytes_min == m * k + n * k + 4 + 4 + m * n * 2
    bound = sol_time_ms(cost, H100)
    assert bound.t_tensor_ms == pytest.approx(2 * m * n * k / 1978.9e12 * 1e3)
    solar = analyse(d, {}, convention="solar")
    assert solar.byte_width == 1.0 and solar.bytes_min == m * k + n * k + 1 + 1 + m * n


def test_nvfp4_scaled_mm(definition_of):
    m, n, k = 128, 128, 64  # packed fp4: 32 stored elements hold 64 values
    ref = ("import torch\n"
           "def run(a, b, sa, sb):\n"
           "    return torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16)\n")
    d = definition_of({"a": (["M", "KH"], "float4_e2m1fn_x2"), "b": (["N", "KH"], "float4_e2m1fn_x2"),
                       "sa": (["SA"], "float8_e4m3fn"), "sb": (["SB"], "float8_e4m3fn")},
                      {"c": (["M", "N"], "bfloat16")}, ref,
                      {"M": m, "N": n, "KH": k // 2, "SA": m * k // 16, "SB": n * k // 16})
    cost = analyse(d, {})
    assert cost.flops_matmul == {"float4_e2m1fn_x2": 2 * m * n * k}
    assert cost.bytes_min == m * 32 + n * 32 + 512 + 512 + m * n * 2
    b200 = load_spec("B200")
    assert sol_time_ms(cost, b200).t_tensor_ms == pytest.approx(2 * m * n * k / 7245e12 * 1e3)
    solar = analyse(d, {}, convention="solar")
    # the tensor cores contract over the logical K (64 values), not the stored width plus scale blocks
    assert solar.flops_matmul == {"float4_e2m1fn_x2": 2 * m * n * k}
    # one 0.5-byte width for every value: 64 fp4 values per row of a and b, scales and output too
    assert solar.bytes_min == (m * 64 + n * 64 + 512 + 512 + m * n) * 0.5


def test_gather_reads_only_gathered_rows(definition_of):
    v, t, dim = 1000, 10, 64
    ref = "import torch.nn.functional as F\ndef run(table, idx):\n    return F.embedding(idx, table)\n"
    d = definition_of({"table": (["V", "D"], "float32"), "idx": (["T"], "int64")},
                      {"out": (["T", "D"], "float32")}, ref, {"V": v, "T": t, "D": dim})
    cost = analyse(d, {})
    assert cost.bytes_by_tensor == {"table": t * dim * 4, "idx": t * 8, "out": t * dim * 4}
    ref2 = "def run(table, idx):\n    return table[idx]\n"
    d2 = definition_of({"table": (["V", "D"], "float32"), "idx": (["T"], "int64")},
                       {"out": (["T", "D"], "float32")}, ref2, {"V": v, "T": t, "D": dim})
    assert analyse(d2, {}).bytes_by_tensor["table"] == t * dim * 4


def test_slice_reads_its_region_and_broadcast_its_distinct_elements(definition_of):
    b, s, h = 4, 16, 32
    ref = "def run(x, bias):\n    return x[:, -1, :] + bias\n"
    d = definition_of({"x": (["B", "S", "H"], "bfloat16"), "bias": (["H"], "bfloat16")},
                      {"y": (["B", "H"], "bfloat16")}, ref, {"B": b, "S": s, "H": h})
    assert analyse(d, {}).bytes_by_tensor == {"x": b * h * 2, "bias": h * 2, "y": b * h * 2}


def test_unknown_op_is_reported_not_silent(definition_of):
    ref = "import torch\ndef run(a):\n    return torch.linalg.qr(a)[0]\n"
    d = definition_of({"a": (["N", "N"], "float32")}, {"q": (["N", "N"], "float32")}, ref, {"N": 8})
    cost = analyse(d, {})
    assert any("qr" in u for u in cost.unknown_ops)


def test_data_dependent_reference_falls_back_with_a_note(definition_of):
    ref = ("def run(x, n):\n"
           "    k = int(n.sum().item())\n"
           "    assert k == 7\n"
           "    return x * 2\n")
    d = definition_of({"x": (["N"], "float32"), "n": (["N"], "int32")}, {"y": (["N"], "float32")}, ref, {"N": 16})
    cost = analyse(d, {})
    assert cost.method == "declared-io"
    assert cost.bytes_min == 16 * 4 + 16 * 4 + 16 * 4
    assert cost.unknown_ops and any("not traced" in n for n in cost.notes)


def test_in_place_output_of_an_input_writes_nothing_provable(definition_of):
    ref = "def run(cache, new):\n    cache[:4] = new\n    return cache\n"
    d = definition_of({"cache": (["N", "D"], "float32"), "new": (["M", "D"], "float32")},
                      {"out": (["N", "D"], "float32")}, ref, {"N": 64, "M": 4, "D": 8})
    cost = analyse(d, {})
    assert cost.output_bytes == 0  # the reference hands back its input


def test_big_causal_mask_measured_without_computing_it(definition_of, monkeypatch):
    """Masks too big to compute for real are followed symbolically through ones -> triu -> masked_fill."""
    from solbench.sol import analyser, meta_tracer

    monkeypatch.setattr(meta_tracer, "REAL_NUMEL_LIMIT", 16)
    monkeypatch.setattr(analyser, "_captures", analyser.OrderedDict())
    b, h, length, dim = 1, 2, 96, 32
    ref = (
        "import torch\n"
        "def run(q, k, v):\n"
        "    s = q @ k.transpose(-1, -2)\n"
        "    mask = torch.triu(torch.ones(q.shape[-2], q.shape[-2], device=q.device), diagonal=1).bool()\n"
        "    s = s.masked_fill(mask, float('-inf'))\n"
        "    return torch.softmax(s, dim=-1) @ v\n"
    )
    d = _attention_definition(definition_of, ref, b=b, h=h, length=length, dim=dim)
    full = 4 * b * h * length * length * dim
    assert analyse(d, {}).flops_matmul["bfloat16"] == pytest.approx(full * (length + 1) / (2 * length))
