"""The anti-cheat suite: two tiny fp32 problems, the hostile and legitimate solutions, and a runner.

The problems (written by this module, never read from shared data):

* `ac_axpy`: `out = 2 x + y` over vectors; the original suite, one workload by default.
* `ac_echo`: outputs that repeat inputs (issue 31): honest solutions may return views of them.
* `ac_rmsnorm`: a row-wise RMS norm over `rows x hidden` with a per-column weight. Its workloads
  have different shapes (hidden not a power of two), and every one of them runs, so a JIT kernel
  re-specialises (new constexpr block sizes, a new autotuning key, new CUDA graphs) inside one
  worker, as it would in a real run; the agent-style legitimate corpus targets it.

Each solution file under `hostile/` and `legit/` starts with a docstring saying what it does and
header comments the tests read:

    # solbench: problem=ac_axpy          (the problem: ac_axpy or ac_rmsnorm)
    # expect: REWARD_HACK                (the status every evaluated workload must end with; PASSED for legit)
    # expect-log: some text              (optional, repeatable: each must appear in the first trace's log;
    #                                      "a|b": either one)
    # expect-flag: name                  (optional, repeatable: a latency flag every passing trace carries;
    #                                      "gpu:name": only on a CUDA machine)
    # device: gpu                        (optional: only on a CUDA machine)
    # needs: cupti                       (optional: only caught where cupti-python is installed; a language
    #                                      name: where its package is); elsewhere the
    #                                      case is skipped and says why, since no defence there can see it)

JSON solutions (several sources) carry the same headers in a top-level "x-expect" object.
Used by the CPU tests (tests/anticheat/test_suite.py) and by benchmarks/anticheat_gpu.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROBLEM = "ac_axpy"
RMSNORM = "ac_rmsnorm"

REFERENCE = '''
import torch

def run(x, y):
    return x * 2.0 + y
'''


def write_problem(root: Path, sizes=(64, 96)) -> Path:
    """`out = 2 x + y` over fp32 vectors: tiny, exact enough for tight tolerances, cheap to run."""
    folder = root / PROBLEM
    folder.mkdir(parents=True, exist_ok=True)
    definition = {
        "name": PROBLEM,
        "description": "out = 2 x + y (anti-cheat suite)",
        "axes": {"n": {"type": "var"}},
        "inputs": {"x": {"shape": ["n"], "dtype": "float32"}, "y": {"shape": ["n"], "dtype": "float32"}},
        "outputs": {"out": {"shape": ["n"], "dtype": "float32"}},
        "reference": textwrap.dedent(REFERENCE).lstrip(),
    }
    (folder / "definition.json").write_text(json.dumps(definition, indent=2))
    lines = [json.dumps({"uuid": f"ac{i}-{n}", "axes": {"n": n},
                         "inputs": {"x": {"type": "random"}, "y": {"type": "random"}},
                         "tolerance": {"max_atol": 1e-5, "max_rtol": 1e-5}}) for i, n in enumerate(sizes)]
    (folder / "workload.jsonl").write_text("\n".join(lines) + "\n")
    return folder


RMSNORM_REFERENCE = '''
import torch

EPS = 1e-6


def run(x, weight):
    variance = x.pow(2).mean(dim=-1, keepdim=True)
    return x * torch.rsqrt(variance + EPS) * weight
'''

# (rows, hidden): every workload a new shape, hidden never a power of two past the first, so block
# sizes, masks and autotuning keys change between workloads; small enough for Triton's interpreter.
RMSNORM_SHAPES = ((4, 64), (19, 96), (37, 200))


def write_rmsnorm_problem(root: Path, shapes=RMSNORM_SHAPES) -> Path:
    """`out = x / sqrt(mean(x^2, row) + eps) * weight` in fp32: per-row statistics, one weight per column."""
    folder = root / RMSNORM
    folder.mkdir(parents=True, exist_ok=True)
    definition = {
        "name": RMSNORM,
        "description": "RMS norm over the last dimension, eps 1e-6 (anti-cheat suite)",
        "axes": {"rows": {"type": "var"}, "hidden": {"type": "var"}},
        "inputs": {"x": {"shape": ["rows", "hidden"], "dtype": "float32"},
                   "weight": {"shape": ["hidden"], "dtype": "float32"}},
        "outputs": {"out": {"shape": ["rows", "hidden"], "dtype": "float32"}},
        "reference": textwrap.dedent(RMSNORM_REFERENCE).lstrip(),
    }
    (folder / "definition.json").write_text(json.dumps(definition, indent=2))
    lines = [json.dumps({"uuid": f"acrms{i}-{rows}x{hidden}", "axes": {"rows": rows, "hidden": hidden},
                         "inputs": {"x": {"type": "random"}, "weight": {"type": "random"}},
                         "tolerance": {"max_atol": 1e-5, "max_rtol": 1e-5, "required_matched_ratio": 1.0}})
             for i, (rows, hidden) in enumerate(shapes)]
    (folder / "workload.jsonl").write_text("\n".join(lines) + "\n")
    return folder


ECHO = "ac_echo"

ECHO_REFERENCE = '''
import torch


def run(x, weight):
    rows = x.shape[0]
    return x * weight, weight.expand(rows, weight.shape[0]).contiguous(), x.clone()
'''


def write_echo_problem(root: Path) -> Path:
    """Three outputs, two of which repeat an input: a scaled `x`, the weight broadcast to every row, and `x`
    itself (as a rotary embedding's cos/sin or a pass-through do). A solution may return the last two as
    views of its inputs (a broadcast view for the weight): judged by value, flagged `output_aliases_input`."""
    folder = root / ECHO
    folder.mkdir(parents=True, exist_ok=True)
    definition = {
        "name": ECHO,
        "description": "x * weight, the weight per row, and x (anti-cheat suite: outputs that repeat inputs)",
        "axes": {"rows": {"type": "var"}, "hidden": {"type": "var"}},
        "inputs": {"x": {"shape": ["rows", "hidden"], "dtype": "float32"},
                   "weight": {"shape": ["hidden"], "dtype": "float32"}},
        "outputs": {"out": {"shape": ["rows", "hidden"], "dtype": "float32"},
                    "weight_rows": {"shape": ["rows", "hidden"], "dtype": "float32"},
                    "x_echo": {"shape": ["rows", "hidden"], "dtype": "float32"}},
        "reference": textwrap.dedent(ECHO_REFERENCE).lstrip(),
    }
    (folder / "definition.json").write_text(json.dumps(definition, indent=2))
    line = {"uuid": "acecho0-8x48", "axes": {"rows": 8, "hidden": 48},
            "inputs": {"x": {"type": "random"}, "weight": {"type": "random"}},
            "tolerance": {"max_atol": 1e-5, "max_rtol": 1e-5, "required_matched_ratio": 1.0}}
    (folder / "workload.jsonl").write_text(json.dumps(line) + "\n")
    return folder


@dataclass(frozen=True)
class SuiteProblem:
    name: str
    write: Callable[[Path], Path]
    all_workloads: bool  # every workload runs, whatever the run's max_workloads (re-specialisation is the point)


PROBLEMS = {p.name: p for p in (SuiteProblem(PROBLEM, write_problem, False),
                                 SuiteProblem(RMSNORM, write_rmsnorm_problem, True),
                                 SuiteProblem(ECHO, write_echo_problem, True))}


@dataclass
class Case:
    path: Path
    kind: str  # "hostile" or "legit"
    expect: str
    logs: list[str] = field(default_factory=list)
    gpu: bool = False
    problem: str = PROBLEM
    needs: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)

    def expected_flags(self, device: str) -> list[str]:
        """The `expect-flag` names that apply on `device` ("gpu:" ones only on CUDA)."""
        return [f.removeprefix("gpu:") for f in self.flags if not f.startswith("gpu:") or device.startswith("cuda")]

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def allowed(self) -> set[str]:
        """`expect: A|B` allows either status (e.g. a catch that depends on how long timing runs)."""
        return set(self.expect.split("|"))

    @property
    def id(self) -> str:
        return f"{self.kind}/{self.name}"


def missing_flags(case: Case, traces, device: str) -> list[str]:
    """The `expect-flag` latency flags some passing trace of `case` lacks on `device`."""
    passed = [t for t in traces if str(t.status) == "PASSED"]
    have = [set(t.evaluation.performance.latency.flags) if t.evaluation.performance and t.evaluation.performance.latency
            else set() for t in passed]
    return sorted({f for f in case.expected_flags(device) for h in have if f not in h})


def _headers(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key, value in re.findall(r"^#\s*(expect|expect-log|expect-flag|device|needs):\s*(.+?)\s*$", text, re.M):
        out.setdefault(key, []).append(value)
    return out


def discover(kind: str | None = None) -> list[Case]:
    cases = []
    from solbench.spec.solution import problem_named_in  # solbench imported lazily, as in the helpers below

    for folder in ("hostile", "legit"):
        if kind not in (None, folder):
            continue
        for path in sorted((HERE / folder).iterdir()):
            if path.suffix == ".py" and not path.name.startswith("_"):
                text = path.read_text()
                headers, problem = _headers(text), problem_named_in(text)
            elif path.suffix == ".json":
                data = json.loads(path.read_text())
                headers = {k: v if isinstance(v, list) else [v] for k, v in data.get("x-expect", {}).items()}
                problem = data.get("definition")
            else:
                continue
            if "expect" not in headers:
                raise ValueError(f"{path} has no '# expect:' header")
            if problem not in PROBLEMS:
                raise ValueError(f"{path} names problem {problem!r}; the suite has {sorted(PROBLEMS)}")
            unknown = set(headers.get("needs", [])) - set(NEEDS)
            if unknown:
                raise ValueError(f"{path} needs {sorted(unknown)}; known: {sorted(NEEDS)}")
            cases.append(Case(path, folder, headers["expect"][0], headers.get("expect-log", []),
                              headers.get("device", ["cpu"])[0] == "gpu", problem, headers.get("needs", []),
                              headers.get("expect-flag", [])))
    names = [c.name for c in cases]
    if len(set(names)) != len(names):
        raise ValueError(f"case names must be unique (benchmarks select by name): {sorted(names)}")
    return cases


def _cupti_missing() -> str | None:
    from solbench.worker.cupti_activity import load_cupti  # solbench imported lazily, as in the helpers below

    if load_cupti() is None:
        return "needs cupti-python (pip install solbench[cuda]): without it no defence sees work this small"
    return None


def _language_missing(name: str) -> Callable[[], str | None]:
    """Why this machine lacks what a language needs (its package, headers or library), or None."""
    def missing() -> str | None:
        from solbench import languages  # solbench imported lazily, as in the helpers below

        return languages.get(name).refusal([], is_cuda=True)
    return missing


NEEDS: dict[str, Callable[[], str | None]] = {
    "cupti": _cupti_missing, **{name: _language_missing(name) for name in (
        "cute_dsl", "cudnn_frontend", "cutlass", "cudnn", "cublas")}}


def missing_needs(case: Case) -> str | None:
    """Why this machine cannot judge the case as its header expects (a `# needs:` it lacks), or None."""
    for need in case.needs:
        reason = NEEDS[need]()
        if reason:
            return reason
    return None


def load_case(case: Case, definition):
    """The case as a Solution (JSON solutions lose their x-expect block first)."""
    from solbench.spec.solution import Solution, load_solution

    if case.path.suffix == ".json":
        data = json.loads(case.path.read_text())
        data.pop("x-expect", None)
        return Solution.from_dict(data, base_dir=case.path.parent)
    return load_solution(case.path, definition)


def fast_config(device: str = "cpu"):
    from solbench.orchestrator.config import RunConfig

    # 12 timed calls: more than the worker's 8 argument slots, so addresses come back within a block.
    return RunConfig(device=device, trials=2, warmup=1, iters=12, adaptive=False, timing_rounds=1,
                     timed_input_sets=2, checked_timed_outputs=3, timeout_s=90, compile_timeout_s=300,
                     max_workloads=1)


def compiling_first(case: Case) -> bool:
    """Sort key: cases that compile (torch.compile, Triton) first. The sessions take jobs in order, and a
    compile takes ten times a plain case on CPU: started last, they left the suite's tail to one session."""
    source = case.path.read_text()
    return not ("torch.compile" in source or "triton" in source)


def run_cases(cases: list[Case], problem_dir: Path, device: str = "cpu", config=None,
              parallel: int = 1, devices: list[str] | None = None, on_trace=None) -> dict[str, list]:
    """Evaluate every case in one scheduler run; traces by case id.

    `parallel` > 1 runs that many device sessions side by side on the same device (for CPU tests,
    where timings do not matter; never for GPU measurements). `devices` spreads the cases over
    several devices instead (one session each, e.g. ["cuda:0", "cuda:1"]).
    """
    from solbench.orchestrator.jobs import make_job
    from solbench.orchestrator.scheduler import run_jobs
    from solbench.spec.problem import load_problem

    config = config or fast_config(device)
    jobs, ids = [], {}
    for case in sorted(cases, key=compiling_first):
        # Each case gets its own copy of the problem: one that writes into its folder touches no other.
        suite_problem = PROBLEMS[case.problem]
        problem = load_problem(suite_problem.write(problem_dir.parent / "cases" / case.kind / case.name))
        solution = load_case(case, problem.definition)
        jobs.append(make_job(problem, solution, None if suite_problem.all_workloads else config.max_workloads))
        ids[solution.content_hash()] = case.id

    def report(job, trace) -> None:
        if on_trace is not None:
            on_trace(ids.get(trace.solution_hash, job.solution.name), trace)

    traces = run_jobs(jobs, config, devices or [device] * parallel, on_trace=report)
    out: dict[str, list] = {case.id: [] for case in cases}
    for trace in traces:
        out[ids[trace.solution_hash]].append(trace)
    return out


@contextlib.contextmanager
def busy_cpus(count: int):
    """`count` processes spinning for as long as the block runs, on top of whatever else the machine does.
    Each spins only while this process lives: a pytest killed with SIGKILL leaves no spinner behind."""
    spin = f"import os\nwhile os.getppid() == {os.getpid()}: pass"
    spinners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()

