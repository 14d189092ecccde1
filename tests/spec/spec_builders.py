"""Builders for small, valid spec documents that each test then breaks in one way."""

from __future__ import annotations

import copy
import json
from pathlib import Path

REFERENCE = '''import torch

def run(x, weight):
    return x * weight
'''


def make_definition(**overrides) -> dict:
    """A minimal valid definition: y[m, n] = x[m, n] * weight[n], with an expr axis."""
    data = {
        "name": "scale_rows",
        "op_type": "elementwise",
        "description": "multiply each row by a weight vector",
        "axes": {
            "m": {"type": "var", "description": "rows"},
            "n": {"type": "const", "value": 8},
            "mn": {"type": "expr", "expression": "m * n"},
        },
        "inputs": {
            "x": {"shape": ["m", "n"], "dtype": "float32"},
            "weight": {"shape": ["n"], "dtype": "float32"},
        },
        "outputs": {"y": {"shape": ["m", "n"], "dtype": "float32"}},
        "reference": REFERENCE,
    }
    data.update(copy.deepcopy(overrides))
    return data


def make_workload(uuid: str = "w-1", **overrides) -> dict:
    data = {"uuid": uuid, "axes": {"m": 4}, "inputs": {"x": {"type": "random"}, "weight": {"type": "random"}},
            "tolerance": {"max_atol": 1e-4, "max_rtol": 1e-4}}
    data.update(copy.deepcopy(overrides))
    return data


def write_problem(folder: Path, definition: dict | None = None, workloads: list[dict] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "definition.json").write_text(json.dumps(definition or make_definition()))
    lines = [json.dumps(w) for w in (workloads if workloads is not None else [make_workload()])]
    (folder / "workload.jsonl").write_text("\n".join(lines) + "\n")
    return folder
