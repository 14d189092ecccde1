"""What a daily user meets after the first run: a dataset with one broken problem, a resumed run's
totals, a leaderboard over a folder of problems, and the one-line messages for common slips."""

from __future__ import annotations

import json
import subprocess
import sys

from solbench import cli
from tests.child_env import repo_env
from tests.runner.conftest import write_problem, write_solution
from tests.test_cli import FAST, REPO, solbench


def test_one_broken_problem_is_named_and_the_rest_of_the_dataset_runs(tmp_path):
    dataset = tmp_path / "dataset"
    write_problem(dataset, sizes=(64,), name="axpy_a")
    broken = write_problem(dataset, sizes=(64,), name="axpy_b") / "definition.json"
    broken.write_text(broken.read_text().replace('"out = 2 x + y"', '"out = 2 x\t+ y"'))  # a raw tab in a string
    result = solbench("run", str(dataset), "-o", str(tmp_path / "t.jsonl"), *FAST)
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if "problem not loaded" in line]
    assert lines == [f"problem not loaded: {broken}: not valid JSON at line 3 column 28: invalid control character"]
    assert "1 problem(s) could not be loaded" in result.stderr and "Traceback" not in result.stderr
    assert [json.loads(line)["definition"] for line in (tmp_path / "t.jsonl").read_text().splitlines()] == ["axpy_a"]


def test_a_resumed_run_shows_every_workload_of_the_trace_file(tmp_path):
    problem = write_problem(tmp_path, sizes=(64, 96, 128))
    traces = tmp_path / "t.jsonl"
    first = solbench("run", str(problem), "--max-workloads", "2", "-o", str(traces), *FAST)
    assert first.returncode == 0, first.stderr
    second = solbench("run", str(problem), "-o", str(traces), *FAST)
    assert second.returncode == 0, second.stderr
    assert "3/3 workloads passed or skipped (2 from before this run); 0 failed" in second.stderr
    rows = [line for line in second.stdout[:second.stdout.index("Summary")].splitlines() if "axpy_fp32" in line]
    assert len(rows) == 3


def test_leaderboard_of_a_folder_reads_traces_not_workloads(tmp_path):
    problem = write_problem(tmp_path / "runs", sizes=(64,))
    result = solbench("run", str(problem), "-o", str(tmp_path / "runs" / "t.jsonl"), *FAST)
    assert result.returncode == 0, result.stderr
    board = solbench("leaderboard", str(tmp_path / "runs"))
    assert board.returncode == 0, board.stderr
    assert "malformed" not in board.stderr and "axpy_fp32" in board.stdout


def test_common_slips_get_one_line_that_says_what_to_do(tmp_path):
    problem = write_problem(tmp_path, sizes=(64,))
    solution = write_solution(tmp_path, "def run(x, y):\n    return x * 2.0 + y\n")
    env = repo_env(REPO, CUDA_VISIBLE_DEVICES="")
    cases = {("--device", "tpu"): "unknown device 'tpu': use auto, cpu, cuda or cuda:N",
             (str(solution),): f"{solution} is a file, not a problem folder: did you mean `--solution {solution}`?"}
    for option, message in cases.items():
        target = [] if option[0].endswith(".py") else [str(problem)]
        result = subprocess.run([sys.executable, "-m", "solbench", "run", *target, *option], env=env,
                                capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert result.returncode == 2, (option, result.stderr)
        assert result.stderr.strip() == f"error: {message}", result.stderr


def test_ctrl_c_before_a_run_does_not_speak_of_a_trace_file(capsys, monkeypatch):
    def interrupted(args):
        raise KeyboardInterrupt

    parser = cli.build_parser()
    args = parser.parse_args(["leaderboard", "x.jsonl"])
    monkeypatch.setattr(cli, "build_parser", lambda: _Fixed(parser, args, interrupted))
    assert cli._main([]) == 130
    assert capsys.readouterr().err.strip() == "interrupted"


class _Fixed:
    """A parser that returns fixed arguments whose command is interrupted at once (Ctrl-C in its first second)."""

    def __init__(self, parser, args, func):
        self.parser, self.args = parser, args
        self.args.func = func

    def parse_args(self, argv):
        return self.args

    def print_help(self):
        self.parser.print_help()


def test_the_t_sol_note_says_why_that_gpu_with_and_without_hw(tmp_path):
    """On a CPU, `--hw H100_SXM` is the reason the bounds are an H100's: the note says so, not "no --hw"."""
    problem = write_problem(tmp_path, sizes=(64,))
    env = repo_env(REPO, CUDA_VISIBLE_DEVICES="")
    notes = {}
    for hw in ([], ["--hw", "h100_sxm"]):
        result = subprocess.run([sys.executable, "-m", "solbench", "run", str(problem), *FAST, *hw, "-o",
                                 str(tmp_path / f"t{len(hw)}.jsonl")], env=env, capture_output=True, text=True,
                                timeout=300, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        notes[bool(hw)] = " ".join(result.stdout[result.stdout.index("Speed of light:"):].split())
    assert "the GPU named with --hw: this run has no GPU" in notes[True] and "no --hw" not in notes[True]
    assert "because this run has no GPU and no --hw" in notes[False]


def test_a_missing_dataset_folder_says_how_to_get_the_dataset(tmp_path, capsys):
    missing = tmp_path / "sol-execbench"
    assert cli._main(["run", str(missing)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{missing} does not exist" in err and "solbench pull nvidia/SOL-ExecBench" in err
    assert "--from-parquet" in err and "Traceback" not in err
