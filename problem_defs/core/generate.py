"""Writes the core problems' definition.json and workload.jsonl from the tables below.

Run from the repository root after editing a problem or its reference:

    python problem_defs/core/generate.py

Each definition's `reference` is the content of reference_impls/core/<name>.py, verbatim, so
the reference stays readable as a file. Workload uuids are uuid5 of the problem name and the
workload's axes, so regenerating never changes them. Token counts are ordered tiny-first: the
first two workloads of each problem run in well under a second on a CPU.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "problem_defs" / "core"
REFERENCES = ROOT / "reference_impls" / "core"

BF16_TOLERANCE = {"max_atol": 1e-2, "max_rtol": 1e-2, "required_matched_ratio": 0.99}
FP32_TOLERANCE = {"max_atol": 1e-4, "max_rtol": 1e-4, "required_matched_ratio": 1.0}

TOKENS = "number of tokens (rows); batch size times sequence length for prefill, batch size for decode"

PROBLEMS: list[dict] = [
    {
        "name": "rmsnorm_h4096",
        "op_type": "rmsnorm",
        "hf_id": "Qwen/Qwen3-8B",
        "description": "RMSNorm of bfloat16 hidden states, hidden size 4096, eps 1e-6 (fixed in the "
                       "reference); statistics in float32.",
        "axes": {
            "num_tokens": {"type": "var", "description": TOKENS},
            "hidden_size": {"type": "const", "value": 4096, "description": "model width"},
        },
        "inputs": {
            "hidden_states": {"shape": ["num_tokens", "hidden_size"], "dtype": "bfloat16",
                              "description": "activations to normalise, one row per token"},
            "weight": {"shape": ["hidden_size"], "dtype": "bfloat16",
                       "description": "per-feature scale (gamma)"},
        },
        "outputs": {
            "output": {"shape": ["num_tokens", "hidden_size"], "dtype": "bfloat16",
                       "description": "x / sqrt(mean(x^2) + eps) * weight"},
        },
        "tokens": [1, 7, 32, 128, 512, 2048, 4096, 8192],
        "token_axis": "num_tokens",
        "tolerance": BF16_TOLERANCE,
    },
    {
        "name": "swiglu_mlp_gateup_h2048_i6144",
        "op_type": "mlp",
        "hf_id": "Qwen/Qwen3-1.7B",
        "description": "SwiGLU MLP down(silu(gate(x)) * up(x)) in bfloat16 with a merged gate/up "
                       "weight, hidden size 2048, intermediate size 6144.",
        "axes": {
            "num_tokens": {"type": "var", "description": TOKENS},
            "hidden_size": {"type": "const", "value": 2048, "description": "model width"},
            "intermediate_size": {"type": "const", "value": 6144, "description": "MLP width"},
            "gate_up_size": {"type": "expr", "expression": "2 * intermediate_size",
                             "description": "rows of the merged gate/up weight"},
        },
        "inputs": {
            "hidden_states": {"shape": ["num_tokens", "hidden_size"], "dtype": "bfloat16",
                              "description": "input activations, one row per token"},
            "gate_up_weight": {"shape": ["gate_up_size", "hidden_size"], "dtype": "bfloat16",
                               "description": "merged projection, nn.Linear layout [out, in]: rows "
                                              "[0, intermediate_size) are gate, the rest up"},
            "down_weight": {"shape": ["hidden_size", "intermediate_size"], "dtype": "bfloat16",
                            "description": "down projection, nn.Linear layout [out, in]"},
        },
        "outputs": {
            "output": {"shape": ["num_tokens", "hidden_size"], "dtype": "bfloat16",
                       "description": "MLP output, one row per token"},
        },
        "tokens": [1, 8, 64, 256, 1024, 2048, 4096, 8192],
        "token_axis": "num_tokens",
        "tolerance": BF16_TOLERANCE,
    },
    {
        "name": "gemm_n4096_k4096",
        "op_type": "gemm",
        "hf_id": "meta-llama/Llama-3.1-8B",
        "description": "bfloat16 GEMM C = A @ B^T with B stored [N, K] (nn.Linear layout), N = K = 4096; "
                       "float32 accumulation.",
        "axes": {
            "M": {"type": "var", "description": TOKENS},
            "N": {"type": "const", "value": 4096, "description": "output features"},
            "K": {"type": "const", "value": 4096, "description": "input features (reduction)"},
        },
        "inputs": {
            "A": {"shape": ["M", "K"], "dtype": "bfloat16", "description": "activations, row-major"},
            "B": {"shape": ["N", "K"], "dtype": "bfloat16", "description": "weight, row-major [out, in]"},
        },
        "outputs": {
            "C": {"shape": ["M", "N"], "dtype": "bfloat16", "description": "A @ B^T"},
        },
        "tokens": [1, 16, 128, 512, 1024, 2048, 4096, 8192],
        "token_axis": "M",
        "tolerance": BF16_TOLERANCE,
    },
    {
        "name": "layernorm_fp32_h1024",
        "op_type": "layernorm",
        "description": "LayerNorm in float32 over 1024 features with weight and bias, eps 1e-5 (fixed "
                       "in the reference), biased variance as torch.nn.LayerNorm.",
        "axes": {
            "num_tokens": {"type": "var", "description": TOKENS},
            "hidden_size": {"type": "const", "value": 1024, "description": "normalised feature count"},
        },
        "inputs": {
            "x": {"shape": ["num_tokens", "hidden_size"], "dtype": "float32",
                  "description": "activations to normalise, one row per token"},
            "weight": {"shape": ["hidden_size"], "dtype": "float32", "description": "per-feature scale (gamma)"},
            "bias": {"shape": ["hidden_size"], "dtype": "float32", "description": "per-feature shift (beta)"},
        },
        "outputs": {
            "y": {"shape": ["num_tokens", "hidden_size"], "dtype": "float32",
                  "description": "(x - mean) / sqrt(var + eps) * weight + bias"},
        },
        "tokens": [1, 5, 64, 256, 1024, 2048, 4096, 8192],
        "token_axis": "num_tokens",
        "tolerance": FP32_TOLERANCE,
    },
]


def workload_uuid(name: str, axes: dict[str, int]) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"solbench/core/{name}?{json.dumps(axes, sort_keys=True)}"))


def build(problem: dict) -> tuple[dict, list[dict]]:
    name = problem["name"]
    definition = {k: problem[k] for k in ("name", "op_type", "hf_id", "description") if k in problem}
    definition |= {"axes": problem["axes"], "inputs": problem["inputs"], "outputs": problem["outputs"],
                   "reference": (REFERENCES / f"{name}.py").read_text()}
    workloads = []
    for tokens in problem["tokens"]:
        axes = {problem["token_axis"]: tokens}
        workloads.append({"uuid": workload_uuid(name, axes), "axes": axes,
                          "inputs": {k: {"type": "random"} for k in problem["inputs"]},
                          "tolerance": problem["tolerance"]})
    return definition, workloads


def render(problem: dict) -> dict[str, str]:
    """The text of each file of one problem folder."""
    definition, workloads = build(problem)
    return {"definition.json": json.dumps(definition, indent=2) + "\n",
            "workload.jsonl": "".join(json.dumps(w) + "\n" for w in workloads)}


def main() -> None:
    for problem in PROBLEMS:
        folder = OUT / problem["name"]
        folder.mkdir(parents=True, exist_ok=True)
        for filename, text in render(problem).items():
            (folder / filename).write_text(text)
        print(f"wrote {folder.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
