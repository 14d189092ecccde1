"""docs/ci.md's counts of the shipped solutions' workload items are the gate's (collection only, no evaluation)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


class Collected:
    def __init__(self) -> None:
        self.items: list = []

    def pytest_collection_finish(self, session) -> None:
        self.items = [item for item in session.items if item.get_closest_marker("solbench") is not None]


def collect(tmp_path: Path, *args: str) -> Collected:
    ini = tmp_path / "pytest.ini"
    ini.write_text("[pytest]\n")
    collected = Collected()
    code = pytest.main(["-p", "solbench.pytest_plugin", "-p", "no:cacheprovider", "-c", str(ini), "--rootdir",
                        str(REPO), "--solbench-trust-tree", "--solbench", str(REPO / "solutions"),
                        "--solbench-problems", str(REPO / "problem_defs"), "--collect-only", "-q", *args],
                       plugins=[collected])
    assert code == 0
    return collected


def test_the_counts_in_docs_ci_are_the_gates(tmp_path, capsys):
    text = (REPO / "docs" / "ci.md").read_text()
    every = int(re.search(r"The shipped solutions make (\d+) workload items", text).group(1))
    limited, files = map(int, re.search(r"\((\d+) workloads of (\d+) solution files\)", text).groups())
    line = re.search(r"`solbench: (\d+) workload\(s\) of (\d+) solution file\(s\) on cpu", text)
    assert (int(line.group(1)), int(line.group(2))) == (limited, files)
    assert len(collect(tmp_path).items) == every
    two = collect(tmp_path, "--solbench-max-workloads", "2").items
    capsys.readouterr()
    assert (len(two), len({item.path for item in two})) == (limited, files)
