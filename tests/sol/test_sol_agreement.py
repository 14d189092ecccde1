"""benchmarks/sol_agreement.py: the agreement table from a published CSV, run as a real process on
hand-made records (no analysis), and on the shared data's first problem when present."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "sol_agreement.py"
HEADER = "category,name,workload_index,uuid,axes,sol_ms\n"


def _run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=120)


def _records(path: Path, ours: dict) -> Path:
    path.write_text("".join(json.dumps({"problem": p, "uuid": u, "solar": {"t_sol_ms": t, "bytes": 1.0,
                                                                         "flops_matmul": 0.0, "method": "meta"}})
                            + "\n" for (p, u), t in ours.items()))
    return path


def test_table_buckets_and_worst_problems(tmp_path):
    published = {("L1", "a", "u1"): "0.0100", ("L1", "a", "u2"): "0.0100", ("L1", "a", "u3"): "0.0100",
                 ("Quant", "b", "u4"): "1e-05", ("Quant", "b", "u5"): "0.0007", ("L2", "c", "u6"): "0.0007"}
    ours = {("L1/a", "u1"): 0.0105,  # within
            ("L1/a", "u2"): 0.0300,  # 3x: above 2
            ("L1/a", "u3"): 0.0150,  # 1.5x
            ("Quant/b", "u4"): 0.000004,  # 0.4x: below 0.5
            ("Quant/b", "u5"): 0.0006,  # 0.86x, but 0.00065 rounds to 0.0007 and 0.0006 is within 10 % of it
            ("L2/c", "u6"): 0.0007}
    csv = tmp_path / "pub.csv"
    csv.write_text(HEADER + "".join(f"{c},{n},0,{u},{{}},{ms}\n" for (c, n, u), ms in published.items()))
    out = _run(csv, "--from", _records(tmp_path / "r.jsonl", ours))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "6 workloads, 3 problems: 33.3% within +-10%" in text
    assert "50.0% within +-10% or the published value's rounding (1 more" in text
    assert "| category | L1 | L2 | Quant |" in text and "| within +-10% | 33.3% | 100.0% | 0.0% |" in text
    assert "4 misses: 1 below 0.5, 1 0.5-0.9, 1 1.1-2, 1 above 2" in text
    assert "| L1/a | 2/3 | 1.5 | 1.05-3 |" in text and "| Quant/b | 2/2 |" in text
    assert "L2/c" not in text.split("problems with more than half")[1]


def test_bad_csv_is_one_line(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    out = _run(bad, "--from", _records(tmp_path / "r.jsonl", {}))
    assert out.returncode != 0 and "not a published sol_ms CSV" in out.stderr and "Traceback" not in out.stderr
    missing = _run(tmp_path / "absent.csv")
    assert missing.returncode == 2 and "no published CSV" in missing.stderr


def test_analyses_a_shared_problem(tmp_path, sol_execbench_dir):
    """Without --from it analyses the CSV's problems itself (one small problem here)."""
    csv_path = sol_execbench_dir / "published_b200_sol_half.csv"
    if not csv_path.is_file():
        pytest.skip("published_b200_sol_half.csv not in the shared data")
    lines = [line for line in csv_path.read_text().splitlines()[1:] if ",028_hybrid_attention_mask" in line]
    if not lines:
        pytest.skip("L1/028 not in the published half")
    small = tmp_path / "one.csv"
    small.write_text(HEADER + "\n".join(lines) + "\n")
    out = _run(small, "--shared", sol_execbench_dir, "--jobs", 1, "--save", tmp_path / "saved.jsonl")
    assert out.returncode == 0, out.stderr
    assert f"{len(lines)} workloads, 1 problems" in out.stdout
    assert len((tmp_path / "saved.jsonl").read_text().splitlines()) >= len(lines)
