"""Twenty candidates for `layernorm_fp32_h1024`, as an agent's loop produces them: correct, wrong and slower
variants, in PyTorch and Triton (benchmarks/agent_loop.py writes them to a folder and judges each one).

float32 throughout, so the Triton variants also run on a CPU (TRITON_INTERPRET=1 computes bfloat16 wrongly).
The expected verdicts are not asserted here: agent_loop.py compares every way's verdicts with a cold
`solbench run`'s. `EXPECTED` says what each variant is meant to be, for the reader.
"""

from __future__ import annotations

from pathlib import Path

PROBLEM = "layernorm_fp32_h1024"
HEADER = f"# solbench: problem={PROBLEM}\nimport torch\nEPS = 1e-5\n"
TRITON_HEADER = HEADER + "import triton\nimport triton.language as tl\n"

TORCH = {
    "torch_layer_norm": "def run(x, weight, bias):\n"
                        "    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, EPS)\n",
    "torch_two_pass": "def run(x, weight, bias):\n"
                      "    mean = x.mean(-1, keepdim=True)\n"
                      "    centred = x - mean\n"
                      "    return centred * torch.rsqrt(centred.square().mean(-1, keepdim=True) + EPS) * weight + bias\n",
    "torch_var_mean": "def run(x, weight, bias):\n"
                      "    var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)\n"
                      "    return torch.addcmul(bias, (x - mean) * torch.rsqrt(var + EPS), weight)\n",
    "torch_native": "def run(x, weight, bias):\n"
                    "    return torch.native_layer_norm(x, (x.shape[-1],), weight, bias, EPS)[0]\n",
    "torch_out": "def run(x, weight, bias, y):\n"
                "    y.copy_(torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, EPS))\n",
    # slower, still correct
    "torch_slow_twice": "def run(x, weight, bias):\n"
                        "    torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, EPS)\n"
                        "    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, EPS)\n",
    "torch_slow_float64": "def run(x, weight, bias):\n"
                          "    x64 = x.double()\n"
                          "    mean = x64.mean(-1, keepdim=True)\n"
                          "    var = (x64 - mean).square().mean(-1, keepdim=True)\n"
                          "    return ((x64 - mean) * torch.rsqrt(var + EPS) * weight.double() + bias.double()).float()\n",
    "torch_slow_chunks": "def run(x, weight, bias):\n"
                         "    parts = [torch.nn.functional.layer_norm(c, (x.shape[-1],), weight, bias, EPS)\n"
                         "             for c in x.split(2)]\n"
                         "    return torch.cat(parts) if parts else torch.empty_like(x)\n",
    # wrong
    "torch_wrong_eps": "def run(x, weight, bias):\n"
                       "    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, 1.0)\n",
    "torch_wrong_no_bias": "def run(x, weight, bias):\n"
                           "    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, None, EPS)\n",
    "torch_wrong_shape": "def run(x, weight, bias):\n"
                         "    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, EPS)[:, :512]\n",
    "torch_wrong_raises": "def run(x, weight, bias):\n"
                          "    raise RuntimeError('this candidate does not handle ' + str(tuple(x.shape)))\n",
}

# One program per row; STATS picks how mean and variance are computed, SCALE how y is formed.
ROW_KERNEL = """
@triton.jit
def _row(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n_cols
    centred = tl.where(mask, x - mean, 0.0)
    rstd = tl.rsqrt(tl.sum(centred * centred, axis=0) / {DIVISOR} + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * n_cols + cols, {RESULT}, mask=mask)


def run(x, weight, bias):
    x = x.contiguous()
    y = torch.empty_like(x)
    if x.shape[0]:
        for _ in range({LAUNCHES}):
            _row[(x.shape[0],)](x, weight, bias, y, x.shape[1], EPS, BLOCK=triton.next_power_of_2(x.shape[1]),
                                num_warps={WARPS})
    return y
"""

# Several rows per program, the row walked in chunks from global memory (two passes): slower per row.
CHUNKED_KERNEL = """
@triton.jit
def _rows(x_ptr, w_ptr, b_ptr, y_ptr, n_rows, n_cols, eps, ROWS: tl.constexpr, CHUNK: tl.constexpr):
    for r in range(ROWS):
        row = (tl.program_id(0) * ROWS + r).to(tl.int64)
        if row < n_rows:
            acc = tl.zeros((CHUNK,), dtype=tl.float32)
            for start in range(0, n_cols, CHUNK):
                cols = start + tl.arange(0, CHUNK)
                acc += tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
            mean = tl.sum(acc, axis=0) / n_cols
            acc = tl.zeros((CHUNK,), dtype=tl.float32)
            for start in range(0, n_cols, CHUNK):
                cols = start + tl.arange(0, CHUNK)
                v = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
                d = tl.where(cols < n_cols, v - mean, 0.0)
                acc += d * d
            rstd = tl.rsqrt(tl.sum(acc, axis=0) / n_cols + eps)
            for start in range(0, n_cols, CHUNK):
                cols = start + tl.arange(0, CHUNK)
                m = cols < n_cols
                v = tl.load(x_ptr + row * n_cols + cols, mask=m, other=0.0)
                w = tl.load(w_ptr + cols, mask=m, other=0.0)
                b = tl.load(b_ptr + cols, mask=m, other=0.0)
                tl.store(y_ptr + row * n_cols + cols, (v - mean) * rstd * w + b, mask=m)


def run(x, weight, bias):
    x = x.contiguous()
    y = torch.empty_like(x)
    rows = {ROWS}
    if x.shape[0]:
        _rows[(triton.cdiv(x.shape[0], rows),)](x, weight, bias, y, x.shape[0], x.shape[1], EPS, ROWS=rows,
                                               CHUNK={CHUNK}, num_warps={WARPS})
    return y
"""

CORRECT = "centred * rstd * w + b"


def _row(divisor: str = "n_cols", result: str = CORRECT, launches: int = 1, warps: int = 4) -> str:
    return TRITON_HEADER + ROW_KERNEL.replace("{DIVISOR}", divisor).replace("{RESULT}", result).replace(
        "{LAUNCHES}", str(launches)).replace("{WARPS}", str(warps))


def _chunked(rows: int, chunk: int, warps: int) -> str:
    return TRITON_HEADER + CHUNKED_KERNEL.replace("{ROWS}", str(rows)).replace("{CHUNK}", str(chunk)).replace(
        "{WARPS}", str(warps))


TRITON = {
    "triton_row": _row(),
    "triton_row_8warps": _row(warps=8),
    "triton_chunked_4rows": _chunked(4, 1024, 4),
    "triton_slow_twice": _row(launches=2),
    "triton_slow_chunked_1warp": _chunked(1, 128, 1),
    "triton_wrong_unbiased": _row(divisor="(n_cols - 1)"),
    "triton_wrong_no_weight": _row(result="centred * rstd + b"),
    "triton_wrong_compile": _row(result="centred * rstd * w + b + tl.no_such_function(x)"),
}

EXPECTED = {name: ("INCORRECT_*" if "wrong_shape" not in name else "INCORRECT_SHAPE") if "_wrong_" in name
            else "PASSED" for name in [*TORCH, *TRITON]}
EXPECTED.update({"torch_wrong_raises": "RUNTIME_ERROR", "triton_wrong_compile": "RUNTIME_ERROR or COMPILE_ERROR"})


def write_candidates(folder: Path) -> list[Path]:
    """The twenty candidates as files in `folder` (PyTorch first, then Triton), in a fixed order."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, body in [*((n, HEADER + "\n\n" + b) for n, b in TORCH.items()), *TRITON.items()]:
        path = folder / f"{name}.py"
        path.write_text(body)
        paths.append(path)
    return paths
