"""`benchmarks/anticheat_gpu.py --part K/N`: the suite split over device calls, every case in exactly one part."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

from tests.anticheat.suite import compiling_first, discover
from tests.scripts import BENCHMARKS, benchmark_script

SCRIPT = BENCHMARKS / "anticheat_gpu.py"


@pytest.fixture(scope="module")
def script():
    with benchmark_script("anticheat_gpu.py") as module:
        yield module


def test_parts_cover_the_suite_once_and_spread_neighbours(script):
    cases = discover()
    for n in (1, 2, 3):
        parts = [script.in_part(cases, (k, n)) for k in range(1, n + 1)]
        ids = [c.id for part in parts for c in part]
        assert sorted(ids) == sorted(c.id for c in cases) and len(set(ids)) == len(ids)
        assert max(map(len, parts)) - min(map(len, parts)) <= 1
    first, second = (script.in_part(cases, (k, 2)) for k in (1, 2))
    names = {c.name: 1 for c in first} | {c.name: 2 for c in second}
    assert names["cpp_thread_after_return"] != names["cublas_thread_after_return"]  # two slow builds, two calls


@pytest.mark.parametrize("text", ["0/2", "3/2", "1", "a/b", "1/0", "-1/2"])
def test_bad_part_is_refused(script, text):
    with pytest.raises(argparse.ArgumentTypeError):
        script.part_spec(text)


def test_a_part_runs_only_its_cases_on_cpu(tmp_path):
    cases = [c for c in discover() if not c.gpu]
    # a part of 20 without a compiling case (a torch.compile case alone takes half a minute on a CPU);
    # not the first, so that the part's offset is exercised
    plain = [k for k in range(1, 20) if all(compiling_first(c) for c in cases[k::20])]
    assert plain, "every part of 20 holds a compiling case"
    index = plain[0]
    expected = cases[index::20]
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--workloads", "1",
                           "--part", f"{index + 1}/20"],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = re.search(r"(\d+) hostile, (\d+) legitimate", done.stdout)
    hostile = sum(c.kind == "hostile" for c in expected)
    assert summary and (int(summary[1]), int(summary[2])) == (hostile, len(expected) - hostile)
    assert all(c.name in done.stdout for c in expected)
