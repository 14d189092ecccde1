"""`solbench run` exit codes and messages: 0 all passed, 1 any failed, 2 bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.child_env import repo_env
from tests.runner.conftest import write_problem, write_solution
from tests.signals import default_sigint

REPO = Path(__file__).resolve().parents[1]
FAST = ["--device", "cpu", "--trials", "1", "--iters", "2", "--warmup", "1", "--no-adaptive"]


def solbench(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = repo_env(REPO)
    return subprocess.run([sys.executable, "-m", "solbench", *args], env=env, capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def test_reference_passes_exit_0_and_json_traces(tmp_path):
    problem = write_problem(tmp_path)
    result = solbench("run", str(problem), "--json", *FAST)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [t["evaluation"]["status"] for t in lines] == ["PASSED", "PASSED"]
    perf = lines[0]["evaluation"]["performance"]
    assert perf["latency_ms"] > 0 and perf["latency"]["n"] >= 2
    # The reference is timed too (a false REWARD_HACK on the reference worker once dropped it).
    assert perf["reference_latency_ms"] > 0 and perf["speedup_factor"] > 0
    assert not [w for w in lines[0]["evaluation"]["warnings"] if "reference timing failed" in w]


def test_wrong_solution_exit_1_with_table(tmp_path):
    problem = write_problem(tmp_path)
    wrong = write_solution(tmp_path, "def run(x, y):\n    return x * 2.0 - y\n")
    result = solbench("run", str(problem), "--solution", str(wrong), *FAST)
    assert result.returncode == 1
    assert "INCORRECT_NUMERICAL" in result.stdout


def test_bad_inputs_exit_2_without_traceback(tmp_path):
    problem = write_problem(tmp_path)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "definition.json").write_text("{not json")
    (broken / "workload.jsonl").write_text("")
    bad_dtype = write_problem(tmp_path / "dt", name="bad_dtype")
    data = json.loads((bad_dtype / "definition.json").read_text())
    data["inputs"]["x"]["dtype"] = "float7"
    (bad_dtype / "definition.json").write_text(json.dumps(data))
    cases = [
        ("run", str(tmp_path / "missing")),
        ("run", str(broken)),
        ("run", str(bad_dtype)),
        ("run", str(problem), "--solution", str(tmp_path / "nope.py")),
        ("run", str(problem), "--trials", "0"),
    ]
    for case in cases:
        result = solbench(*case, *FAST[:2])
        assert result.returncode == 2, (case, result.stderr)
        assert "Traceback" not in result.stderr, result.stderr
        assert "error" in result.stderr.lower()
    assert "float7" in solbench("run", str(bad_dtype)).stderr


def test_two_problems_with_one_name_are_bad_input(tmp_path):
    write_problem(tmp_path / "a")
    write_problem(tmp_path / "b")
    result = solbench("run", str(tmp_path), *FAST)
    assert result.returncode == 2 and "two problems are named 'axpy_fp32'" in result.stderr


def imported_modules(*args: str) -> set[str]:
    """Top-level modules imported by `python -X importtime -m solbench ARGS` (from its stderr)."""
    env = repo_env(REPO)
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "solbench", *args], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}


def test_start_up_imports_neither_torch_nor_pandas():
    """`solbench --version`, `--help` of every command and `hw list` start without torch (seconds) or pandas."""
    from solbench.cli import build_parser

    commands = sorted(build_parser()._subparsers._group_actions[0].choices)
    assert {"run", "sol", "hw", "leaderboard", "report"} <= set(commands)
    for args in (["--version"], ["hw", "list"], *([c, "--help"] for c in commands)):
        heavy = imported_modules(*args) & {"torch", "pandas", "triton", "transformers"}
        assert not heavy, (args, heavy)


def test_sol_command_offers_the_analysers_conventions():
    from solbench.cli.sol import CONVENTIONS
    from solbench.sol.analyser import CONVENTIONS as ANALYSER_CONVENTIONS

    assert CONVENTIONS == ANALYSER_CONVENTIONS


def test_hw_list_piped_keeps_every_name_whole():
    from solbench.sol.hardware import list_specs

    result = solbench("hw", "list")  # stdout is a pipe: no terminal width
    assert result.returncode == 0, result.stderr
    assert "…" not in result.stdout
    names = {line.split("│")[1].strip() for line in result.stdout.splitlines() if line.startswith("│")}
    assert names == {s.name for s in list_specs()}


def test_shared_data_skip_says_how_to_get_the_data(tmp_path):
    env = repo_env(REPO, SOLBENCH_SHARED=str(tmp_path / "nowhere"))
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                             "tests/sol/test_sol_shared.py"], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=300)
    skips = [line for line in result.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skips, result.stdout[-2000:]
    for line in skips:
        assert "SOL-ExecBench" in line and "beside the checkout" in line and "SOLBENCH_SHARED" in line, line


HELD = """import os
import time

def run(x, y):
    while x.numel() > 64 and os.path.exists({hold!r}):  # the second workload waits while the file exists
        time.sleep(0.2)
    return x * 2.0 + y
"""


def wait_for_lines(path: Path, count: int, proc: subprocess.Popen, limit_s: float = 240) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and len(path.read_text().splitlines()) >= count:
            return
        time.sleep(0.2)
    raise AssertionError(f"{path} never reached {count} line(s) (exit {proc.poll()})")


def test_ctrl_c_stops_cleanly_and_a_resumed_bar_counts_what_is_done(tmp_path):
    """Ctrl-C (SIGINT to the whole foreground process group, as a terminal sends it) mid-run: exit 130,
    no traceback from any process, the finished workload kept and the one cut short not recorded; the
    re-run says what it resumes and its progress counts the finished workload (2/2, not 1/2)."""
    problem = write_problem(tmp_path)
    hold = tmp_path / "hold"
    hold.write_text("")
    held = write_solution(tmp_path, HELD.format(hold=str(hold)))
    traces = tmp_path / "t.jsonl"
    args = ["run", str(problem), "--solution", str(held), "-o", str(traces), *FAST]
    env = repo_env(REPO)
    proc = subprocess.Popen([sys.executable, "-m", "solbench", *args], env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)
    try:
        wait_for_lines(traces, 1, proc)
        time.sleep(1.0)  # the second workload is under way
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "Traceback" not in err + out and "KeyboardInterrupt" not in err + out, err
    assert "interrupted: 1 finished workload(s) kept" in err and f"-o {traces}" in err
    assert [json.loads(line)["evaluation"]["status"] for line in traces.read_text().splitlines()] == ["PASSED"]

    hold.unlink()
    rerun = solbench(*args)
    assert rerun.returncode == 0, rerun.stderr
    assert f"resuming: 1 of 2 workloads already in {traces}" in rerun.stderr
    assert "2/2" in rerun.stderr and "1/2" not in rerun.stderr
    assert len(traces.read_text().splitlines()) == 2


def test_explicit_requests_that_cannot_be_met_are_bad_input(tmp_path):
    """An unknown --hw, or a CUDA device on a machine without one: exit 2, one clear line, no traceback;
    nothing is run (no silent fallback to the CPU or to no speed of light)."""
    problem = write_problem(tmp_path)
    env = repo_env(REPO, CUDA_VISIBLE_DEVICES="")  # no GPU, whatever the machine
    cases = {("--hw", "Z9000"): "no hardware spec for 'Z9000'", ("--device", "cuda"): "no CUDA GPU is visible",
             ("--device", "cuda:0"): "no CUDA GPU is visible"}
    for option, message in cases.items():
        result = subprocess.run([sys.executable, "-m", "solbench", "run", str(problem), *option, "-o",
                                 str(tmp_path / "t.jsonl")], env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 2, (option, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "t.jsonl").exists()


def test_device_auto_falls_back_to_the_cpu_and_says_so(tmp_path):
    problem = write_problem(tmp_path, sizes=(64,))
    env = repo_env(REPO, CUDA_VISIBLE_DEVICES="")
    result = subprocess.run([sys.executable, "-m", "solbench", "run", str(problem), *FAST[2:], "--device", "auto"],
                            env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "device auto: no CUDA GPU is visible (CUDA_VISIBLE_DEVICES is empty), so the run is on the CPU" \
        in result.stderr


def test_api_explicit_requests_raise(tmp_path, monkeypatch):
    """The README's `api.evaluate(..., device="cuda")` on a machine without a GPU says so (it used to run
    and blame the reference: INVALID_REFERENCE); an unknown hw likewise."""
    import pytest

    from solbench import api
    from solbench.orchestrator.config import DeviceUnavailableError
    from solbench.spec.errors import SpecError

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    problem = write_problem(tmp_path)
    with pytest.raises(DeviceUnavailableError, match="device 'cuda' was asked for, but no CUDA GPU is visible"):
        api.evaluate(problem, device="cuda", max_workloads=1)
    with pytest.raises(SpecError, match="no hardware spec for 'Z9000'"):
        api.evaluate(problem, device="cpu", hw="Z9000", max_workloads=1)


def test_failed_and_skipped_rows_say_why_and_a_run_without_o_keeps_its_traces(tmp_path):
    """Every row that did not pass carries its one-line reason, a section after the tables lists them
    (with the end of a traceback), and the traces of a run without -o are kept where the summary says."""
    problem = write_problem(tmp_path, sizes=(64,))
    broken = tmp_path / "solutions"
    broken.mkdir()
    write_solution(broken, "def run(x, y):\n    return x * 2.0 +\n", "syntax.py")
    write_solution(broken, "def run(x, y):\n    raise ValueError('boom here')\n", "raises.py")
    write_solution(broken, "def run(x, y):\n    return x\n", "view.py")
    (broken / "kernel.cu").write_text("// solbench: problem=axpy_fp32\n"
                                      "torch::Tensor run(torch::Tensor x, torch::Tensor y) { return x * 2 + y; }\n")
    env = repo_env(REPO, CUDA_VISIBLE_DEVICES="")
    env.pop("SOLBENCH_RUNS_DIR", None)  # the default folder, under the working directory (here tmp_path)
    result = subprocess.run([sys.executable, "-m", "solbench", "run", str(problem), "--solution", str(broken), *FAST],
                            env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    results = result.stdout[:result.stdout.index("Summary")]
    rows = {line.split("│")[2].strip(): line for line in results.splitlines() if line.startswith("│")}
    assert "syntax error at line 3" in rows["syntax"] and "ValueError: boom here" in rows["raises"]
    assert "exceed atol" in rows["view"] and "need a CUDA GPU" in rows["kernel"]  # a view is judged by its values
    why = result.stdout[result.stdout.index("Why: 3 failed, 1 skipped"):]
    assert "RUNTIME_ERROR raises on axpy_fp32 (n=64): the solution raised: ValueError: boom here" in why
    assert "raise ValueError('boom here')" in why  # the failing line, from the end of the traceback
    assert "SKIPPED kernel on axpy_fp32 (n=64): cuda_cpp solutions need a CUDA GPU" in why
    kept = list((tmp_path / ".solbench" / "runs").glob("*.jsonl"))
    assert len(kept) == 1 and len(kept[0].read_text().splitlines()) == 4
    assert f"traces in {kept[0].relative_to(tmp_path)}" in result.stderr


@dataclass
class AnalysedRun:
    """One `solbench run` of a shipped problem with an empty speed-of-light cache, and what was seen at its end."""
    result: subprocess.CompletedProcess
    traces: Path
    scratch: Path
    sol_cache: Path
    left: list[str]  # processes of the run still alive after it exited (waited for up to 30 s)


@pytest.fixture(scope="module")
def analysed_run(tmp_path_factory) -> AnalysedRun:
    """Shared by the two tests below (one run of torch-importing workers instead of two): an empty cache
    starts the analysis pool, and TMPDIR is a folder of its own, so its scratch folder can be looked for."""
    tmp_path = tmp_path_factory.mktemp("analysed_run")
    scratch, sol_cache, traces = tmp_path / "tmp", tmp_path / "sol_cache", tmp_path / "traces.jsonl"
    scratch.mkdir()
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv("TMPDIR", str(scratch))
        monkeypatch.setenv("SOLBENCH_SOL_CACHE", str(sol_cache))
        result = solbench("run", str(REPO / "problem_defs/core/rmsnorm_h4096"), "--max-workloads", "2", *FAST,
                          "-o", str(traces))
    marker = str(sol_cache).encode()
    for _ in range(300):  # processes of this run: the only ones with its cache folder in their environment
        left = [pid for pid in os.listdir("/proc") if pid.isdigit() and marker in _environ(pid)]
        if not left:
            break
        time.sleep(0.1)
    return AnalysedRun(result, traces, scratch, sol_cache, left)


def test_a_run_that_analyses_ends_without_leak_warnings(analysed_run):
    """An empty speed-of-light cache starts the analysis pool. Its processes (and the CLI) once froze their
    objects at exit to skip the last garbage collections; triton's nanobind then printed pages of
    "leaked instance" warnings into the run's output."""
    result = analysed_run.result
    assert result.returncode == 0, result.stderr
    assert "leaked" not in result.stderr and "nanobind" not in result.stderr, result.stderr[-2000:]
    assert any(analysed_run.sol_cache.rglob("*")), "the analysis did not run (the cache stayed empty)"


def test_the_command_exits_at_once_with_its_results_written_and_nothing_left_behind(analysed_run, tmp_path):
    """`solbench` ends with os._exit once the command returns (no interpreter teardown): the trace file must
    be whole, the exit handlers run (the run's scratch folder removed), the exit status kept, and no
    analysis process may outlive it."""
    result = analysed_run.result
    assert result.returncode == 0, result.stderr[-2000:]
    lines = analysed_run.traces.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(line)["evaluation"]["status"] == "PASSED" for line in lines)
    assert "2/2 workloads passed" in result.stderr + result.stdout
    assert not list(analysed_run.scratch.glob("solbench_run_*")), "the run folder's exit handler did not run"
    assert not analysed_run.left, f"processes of the run outlived it: {analysed_run.left}"
    bad = solbench("run", str(tmp_path / "no-such-problem"), "-o", str(tmp_path / "t2.jsonl"))
    assert bad.returncode == 2 and "error" in bad.stderr


def _environ(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""
