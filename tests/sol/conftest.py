"""Tiny definitions for hand-checked analyser tests."""

from __future__ import annotations

from solbench.spec.definition import Definition


def make_definition(inputs: dict, outputs: dict, reference: str, axes: dict | None = None,
                    name: str = "t") -> Definition:
    """inputs/outputs: name -> (shape list, dtype); axes: name -> const value."""
    return Definition.from_dict({
        "name": name,
        "axes": {k: {"type": "const", "value": v} for k, v in (axes or {}).items()},
        "inputs": {k: {"shape": s, "dtype": d} for k, (s, d) in inputs.items()},
        "outputs": {k: {"shape": s, "dtype": d} for k, (s, d) in outputs.items()},
        "reference": reference,
    })


import pytest  # noqa: E402

FP8_SCALED_MM = ("import torch\n"
                 "def run(a, b, sa, sb):\n"
                 "    return torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16)\n")


def fp8_scaled_mm_definition(m: int, n: int, k: int) -> Definition:
    """C = A B^T with fp8 operands and scalar scales: M x K and N x K in, bf16 out."""
    return make_definition({"a": (["M", "K"], "float8_e4m3fn"), "b": (["N", "K"], "float8_e4m3fn"),
                            "sa": ([], "float32"), "sb": ([], "float32")}, {"c": (["M", "N"], "bfloat16")},
                           FP8_SCALED_MM, {"M": m, "N": n, "K": k})


def shared_problem(root, pattern: str):
    """The first shared problem matching `pattern` (CATEGORY/NAME glob), or skip: the data is optional."""
    from solbench.spec.problem import load_problem

    matches = sorted(root.glob(pattern))
    if not matches:
        pytest.skip(f"{pattern} not in the shared data")
    return load_problem(matches[0])


@pytest.fixture
def definition_of():
    return make_definition
