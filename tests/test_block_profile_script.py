"""`benchmarks/block_profile.py`'s helpers: requests built for either protocol form, the probe's finish measured."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import pytest

from tests.scripts import BENCHMARKS, benchmark_script

SCRIPT = BENCHMARKS / "block_profile.py"


@pytest.fixture(scope="module")
def block_profile():
    with benchmark_script("block_profile.py") as module:
        yield module


class Spec:
    def to_dict(self) -> dict:
        return {"axes": {"n": 4}}


@dataclass(frozen=True)
class OldTime:  # an older tree's request: plain dicts, no block key
    workload: dict
    seeds: list


@dataclass(frozen=True)
class NewTime:
    workload: Spec
    seeds: list
    block_key: int = 0


def test_request_takes_each_trees_form(block_profile):
    spec = Spec()
    old = block_profile.request(OldTime, workload=spec, seeds=[1], block_key=7)
    assert old == OldTime(workload={"axes": {"n": 4}}, seeds=[1])
    new = block_profile.request(NewTime, workload=spec, seeds=[1], block_key=7)
    assert new.workload is spec and new.block_key == 7


def test_finish_meter_counts_the_records_the_probe_parsed(block_profile):
    class Collector:
        launches = [(1, 1), (2, 2), (3, 3)]
        work = [(1, 2, 1, 1)]

    class Probe:
        def __init__(self):
            self.collector = Collector()

        def finish(self):
            self.collector = None  # as the real probe does: the counts must be read before
            return "result"

    meter = block_profile.FinishMeter(Probe)
    assert Probe().finish() == "result"
    assert len(meter.rows) == 1 and meter.rows[0][1:] == (3, 1) and meter.rows[0][0] >= 0


def test_worker_mode_accounts_each_block_on_cpu():
    """The script end to end, as a worker serves requests (guard installed: in its own process)."""
    problem = SCRIPT.parents[1] / "problem_defs" / "core" / "rmsnorm_h4096"
    done = subprocess.run([sys.executable, str(SCRIPT), str(problem), "--device", "cpu", "--blocks", "2", "--top", "3",
                           "--worker"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    handler_lines = [line for line in done.stdout.splitlines() if line.strip().startswith("handler ")]
    assert len(handler_lines) == 2 and "'release'" in done.stdout


def test_a_tree_without_solbench_is_refused(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--device", "cpu", "--tree", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "no solbench package there" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_folder_that_is_no_problem_gets_one_line(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "missing"), "--device", "cpu"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "is not a problem folder" in done.stderr
    assert "Traceback" not in done.stderr
