"""Turning command-line targets (problem folders, datasets, solution files) into jobs."""

from __future__ import annotations

import json
from pathlib import Path

from solbench.runner.scheduler import Job
from solbench.spec.errors import SpecError
from solbench.spec.problem import Problem, discover_problems, load_problem
from solbench.spec.solution import COMPILED_SUFFIXES, PYTHON_SUFFIXES, load_solution, problem_named_in

SOLUTION_SUFFIXES = (".json",) + PYTHON_SUFFIXES + (".cu",)


def repo_default(folder: str) -> Path:
    """A shipped folder (`problem_defs`, `solutions`): in the working directory, else beside the package."""
    here = Path.cwd() / folder
    if here.is_dir():
        return here
    return Path(__file__).resolve().parents[2] / folder


def load_problems(target: Path) -> list[Problem]:
    paths = discover_problems(target)
    if not paths:
        raise SpecError(f"no problems (definition.json + workload.jsonl) under {target}")
    problems = [load_problem(p) for p in paths]
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
            files += sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in SOLUTION_SUFFIXES
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
    if path.suffix in PYTHON_SUFFIXES or path.suffix in COMPILED_SUFFIXES:
        name = problem_named_in(path.read_text())
        if name is None:
            raise SpecError(f"{path}: name the problem in a header comment, e.g. '# solbench: problem=NAME'")
        return name
    raise SpecError(f"{path}: a solution is a .json, .py or .cu file")


def build_jobs(target: Path, solutions: list[Path] | None) -> list[Job]:
    """Jobs for a problem or dataset folder, with the given solutions or each problem's reference."""
    problems = load_problems(target)
    if not solutions:
        return [Job(p, None) for p in problems]
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
        jobs.append(Job(problem, load_solution(file, problem.definition)))
    return jobs
