"""Jobs: which solution runs on which problem's workloads; built from problem folders, datasets and
solution files (the same for the CLI, the Python API and the pytest plugin)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from solbench.languages import bare_file_suffixes, solution_file_suffixes
from solbench.spec.errors import SpecError
from solbench.spec.problem import Problem, discover_problems, load_problem
from solbench.spec.solution import (
    Solution,
    load_solution,
    problem_named_in,
    reference_solution,
)
from solbench.spec.workload import Workload


@dataclass(frozen=True)
class Job:
    """One solution (None: the problem's reference) on the chosen workloads of one problem."""

    problem: Problem
    solution: Solution | None
    workloads: tuple[Workload, ...]

    def resolved_solution(self) -> Solution:
        return self.solution or reference_solution(self.problem.definition)


def make_job(problem: Problem, solution: Solution | None, max_workloads: int | None = None,
             uuids: set[str] | None = None) -> Job:
    """A job on the problem's first `max_workloads` workloads, or on those named by `uuids`."""
    workloads = tuple(problem.workloads)
    if uuids is not None:
        workloads = tuple(w for w in workloads if w.uuid in uuids)
    if max_workloads:
        workloads = workloads[:max_workloads]
    return Job(problem, solution, workloads)


def repo_default(folder: str) -> Path:
    """A shipped folder (`problem_defs`, `solutions`): in the working directory, else beside the package."""
    here = Path.cwd() / folder
    if here.is_dir():
        return here
    return Path(__file__).resolve().parents[2] / folder


def load_problems(target: Path, unloadable: list[str] | None = None) -> list[Problem]:
    """The problems under `target`. With a list for `unloadable`, a dataset's problem that cannot be
    loaded is noted there (its folder and one-line reason) and the rest are loaded: one broken problem
    does not stop a dataset run. Without one, or when nothing loads, the first error is raised."""
    paths = discover_problems(target)
    if not paths:
        raise SpecError(f"no problems (definition.json + workload.jsonl) under {target}")
    problems, errors = [], []
    for path in paths:
        try:
            problems.append(load_problem(path))
        except SpecError as exc:
            if unloadable is None or len(paths) == 1:
                raise
            errors.append(str(exc))
    if not problems:
        raise SpecError(f"no problem under {target} could be loaded: {errors[0]}")
    if unloadable is not None:
        unloadable += errors
    seen: dict[str, Path] = {}
    for problem in problems:  # solutions name their problem: two problems of one name would be ambiguous
        if problem.name in seen:
            raise SpecError(f"two problems are named {problem.name!r}: {seen[problem.name]} and {problem.directory}")
        seen[problem.name] = problem.directory
    return problems


def solution_files(paths: list[Path]) -> list[Path]:
    """Solution files named directly, or found under folders (JSON, .py and .cu files)."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in solution_file_suffixes()
                            and not _is_json_source(p) and not p.name.startswith(("_", ".")))
        elif path.is_file():
            files.append(path)
        else:
            raise SpecError(f"solution {path} does not exist")
    return files


def _is_json_source(path: Path) -> bool:
    """A .py/.cu file that a solution JSON beside it lists as a source is not a solution itself."""
    if path.suffix == ".json":
        return False
    for sibling in path.parent.glob("*.json"):
        try:
            data = json.loads(sibling.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        sources = data.get("sources", []) if isinstance(data, dict) else []
        if any(isinstance(s, dict) and s.get("path") == path.name for s in sources):
            return True
    return False


def problem_of_solution_file(path: Path) -> str:
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise SpecError(f"{path}: not valid JSON: line {exc.lineno}: {exc.msg}") from None
        if not isinstance(data, dict) or not isinstance(data.get("definition"), str):
            raise SpecError(f"{path}: a solution JSON needs a 'definition' naming its problem")
        return data["definition"]
    if path.suffix in bare_file_suffixes():
        name = problem_named_in(path.read_text())
        if name is None:
            raise SpecError(f"{path}: name the problem in a header comment, e.g. '# solbench: problem=NAME'")
        return name
    raise SpecError(f"{path}: a solution is a .json, .py or .cu file")


def build_jobs(target: Path, solutions: list[Path] | None, max_workloads: int | None = None,
               unloadable: list[str] | None = None) -> list[Job]:
    """Jobs for a problem or dataset folder, with the given solutions or each problem's reference; a
    dataset's problems that cannot be loaded go to `unloadable` when it is given (`load_problems`)."""
    problems = load_problems(target, unloadable)
    if not solutions:
        return [make_job(p, None, max_workloads) for p in problems]
    by_name = {p.name: p for p in problems}
    files = solution_files(solutions)
    if not files:
        raise SpecError(f"no solution files in {', '.join(map(str, solutions))}")
    jobs = []
    for file in files:
        if len(problems) == 1 and file.suffix != ".json" and problem_named_in(file.read_text()) is None:
            name = problems[0].name  # a bare file run against one problem need not name it
        else:
            name = problem_of_solution_file(file)
        problem = by_name.get(name)
        if problem is None:
            raise SpecError(f"{file} is for problem {name!r}, which is not under {target}")
        jobs.append(make_job(problem, load_solution(file, problem.definition), max_workloads))
    return jobs
