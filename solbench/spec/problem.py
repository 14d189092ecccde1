"""A problem folder: `definition.json` + `workload.jsonl` (+ optional solutions), and the optimised
baseline shipped with it, if any."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from solbench.spec.definition import Definition
from solbench.spec.errors import SpecError, json_error
from solbench.spec.solution import Solution, solution_from_source
from solbench.spec.workload import Workload

DEFINITION_FILE = "definition.json"
WORKLOAD_FILE = "workload.jsonl"
BASELINE_FILE = "baseline.py"  # an optimised baseline inside the problem folder
BASELINE_SUFFIX = ".baseline.py"  # reference_impls/<group>/<name>.baseline.py for problem_defs/<group>/<name>


@dataclass(frozen=True)
class Problem:
    definition: Definition
    workloads: tuple[Workload, ...]
    directory: Path | None = None

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def baseline_path(self) -> Path | None:
        return find_baseline(self.directory)


def find_baseline(directory: Path | None) -> Path | None:
    """The optimised baseline shipped with the problem in `directory`, if any.

    `<folder>/baseline.py`, else, for a folder `<root>/problem_defs/<group>/<name>`, the file
    `<root>/reference_impls/<group>/<name>.baseline.py` beside the readable reference. It defines
    `run` with the reference's signature (see docs/sol.md); the definition format is untouched.
    """
    if directory is None:
        return None
    directory = Path(directory).resolve()
    local = directory / BASELINE_FILE
    if local.is_file():
        return local
    for parent in directory.parents:
        if parent.name == "problem_defs":
            relative = directory.relative_to(parent)
            shipped = parent.parent / "reference_impls" / relative.parent / (relative.name + BASELINE_SUFFIX)
            return shipped if shipped.is_file() else None
    return None


def baseline_solution(problem: Problem) -> Solution | None:
    """The shipped baseline wrapped as a trusted single-file solution, or None; SpecError when it
    does not take the reference's inputs (value-returning) or its inputs and outputs (destination-passing)."""
    path = problem.baseline_path
    if path is None:
        return None
    try:
        solution = solution_from_source(BASELINE_FILE, path.read_text(), problem.definition)
    except SpecError as exc:
        raise exc.located(str(path)) from None
    return replace(solution, name=f"baseline_{problem.name}", definition=problem.name, author="baseline")


def read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SpecError(f"{path} does not exist") from None
    except json.JSONDecodeError as exc:
        raise SpecError(json_error(exc), where=str(path)) from None


def load_definition(path: str | Path) -> Definition:
    path = Path(path)
    try:
        return Definition.from_dict(read_json(path))
    except SpecError as exc:
        raise exc.located(str(path)) from None


def load_workloads(path: str | Path, definition: Definition | None = None) -> tuple[Workload, ...]:
    """Parse workload.jsonl; with a definition, also resolve each workload's axes (fail early)."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"{path} does not exist")
    workloads, seen = [], set()
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            workload = Workload.from_dict(json.loads(line))
            if workload.uuid in seen:
                raise SpecError(f"duplicate workload uuid {workload.uuid}")
            seen.add(workload.uuid)
            if definition is not None:
                check_workload(definition, workload)
        except json.JSONDecodeError as exc:
            raise SpecError(json_error(exc).replace(f"line {exc.lineno} ", ""), where=where) from None
        except SpecError as exc:
            raise exc.located(where) from None
        workloads.append(workload)
    return tuple(workloads)


def check_workload(definition: Definition, workload: Workload) -> dict[str, int]:
    """The workload fits the definition: axes resolve, inputs are declared, scalars are scalars."""
    axes = definition.resolve_axes(workload.axes)
    # Extra *custom* inputs are harmless (the entrypoint makes them, run never sees them); others are not.
    unknown = {n for n, src in workload.inputs.items() if n not in definition.inputs and src.kind != "custom"}
    if unknown:
        raise SpecError(f"workload {workload.uuid} gives inputs the definition does not declare: {sorted(unknown)}")
    kinds = {workload.source_of(n).kind for n in definition.inputs}
    if "custom" in kinds and definition.custom_inputs_entrypoint is None:
        raise SpecError(f"workload {workload.uuid} uses custom inputs but the definition has no "
                        f"custom_inputs_entrypoint")
    return axes


def load_problem(path: str | Path) -> Problem:
    """Load a problem folder (or a definition.json beside its workload.jsonl)."""
    path = Path(path)
    directory = path.parent if path.is_file() else path
    if not directory.is_dir():
        raise SpecError(f"{path} is not a problem folder")
    if not (directory / DEFINITION_FILE).is_file():
        raise SpecError(f"{directory} has no {DEFINITION_FILE}")
    definition = load_definition(directory / DEFINITION_FILE)
    workloads = load_workloads(directory / WORKLOAD_FILE, definition)
    return Problem(definition, workloads, directory)


def is_problem_dir(path: Path) -> bool:
    return (path / DEFINITION_FILE).is_file() and (path / WORKLOAD_FILE).is_file()


def discover_problems(root: str | Path) -> list[Path]:
    """Problem folders under `root` (itself, or any depth below), sorted for stable order."""
    root = Path(root)
    if is_problem_dir(root):
        return [root]
    if not root.is_dir():
        raise SpecError(f"{root} is not a folder")
    return sorted(p.parent for p in root.rglob(DEFINITION_FILE) if is_problem_dir(p.parent))
