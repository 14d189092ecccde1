"""A submit request's body, checked field by field: what is wrong is named (`BadRequest.fields`), and the
service answers 400 with it instead of queueing something it cannot run.

    {"problem": "path/on/the/server" | {"path": ...} | {"definition": {...}, "workloads": [{...}], "baseline": "..."},
     "solution": null | {"source": "...", "filename": "k.py"} | {SOL-ExecBench solution JSON},
     "workloads": null | ["uuid", ...],
     "options": {RunConfig field: value, ...}}

A problem sent by content is written to the service's own folder (named by its content's hash), where no
worker can write; a shipped optimised baseline may come with it as `baseline` (its source).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import shutil
import threading
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from solbench.orchestrator.config import RunConfig, configure
from solbench.orchestrator.jobs import make_job
from solbench.orchestrator.session_pool import FIXED_SETTINGS
from solbench.spec.errors import SpecError
from solbench.spec.problem import BASELINE_FILE, load_problem
from solbench.spec.solution import Solution, solution_from_source

TOP_FIELDS = {"problem", "solution", "workloads", "options"}
# Options a submission cannot set: the service fixed them when it started its workers, or (not among
# `solbench run`'s options either) they thin the checks of timed outputs and inputs.
SERVICE_OPTIONS = set(FIXED_SETTINGS) | {"cluster_actors", "checked_timed_outputs", "timed_input_sets", "ipc_min_bytes"}


OPTION_TYPES = {f.name: str(f.type) for f in fields(RunConfig)}  # "int | None", "list[Path]", ...


def _fits(value: Any, declared: str) -> bool:
    """Whether a JSON value can be the RunConfig field declared as `declared` (a type written as text)."""
    kinds = {part.strip().split("[")[0] for part in declared.split("|")}
    checks = {"None": value is None, "bool": isinstance(value, bool),
              "int": isinstance(value, int) and not isinstance(value, bool),
              "float": isinstance(value, (int, float)) and not isinstance(value, bool),
              "str": isinstance(value, str),
              "list": isinstance(value, list) and all(isinstance(v, str) for v in value),
              "dict": isinstance(value, dict) and all(isinstance(v, (int, float)) for v in value.values())}
    return any(checks.get(kind, False) for kind in kinds)


MAX_OPTION_NUMBER = 10**9  # a trial count, a timeout in seconds: beyond it a submission would hold its lane for ever
SIGNED_OPTIONS = {"seed"}


def _out_of_range(name: str, value: Any) -> bool:
    """Whether a numeric option is negative (except a seed), not finite, or too large to be meant."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if name in SIGNED_OPTIONS:
        return abs(value) >= 2**63
    return not 0 <= value <= MAX_OPTION_NUMBER  # False for NaN too: `not` of a failed comparison


def unsafe_name(name: Any) -> bool:
    """Whether a name (a problem's, a workload's uuid, a solution's) could be read as a path: a separator, a
    NUL or other control character, or only dots. Names key files and folders across the harness."""
    return (not isinstance(name, str) or not name.strip() or set(name) <= {"."} or "/" in name or "\\" in name
            or any(ord(c) < 32 or ord(c) == 127 for c in name))


class BadRequest(Exception):
    """A request the service refuses: a one-line reason and the fields it names."""

    def __init__(self, message: str, fields: list[str]):
        super().__init__(message)
        self.message = message
        self.fields = fields


@dataclass(frozen=True)
class SubmitRequest:
    """A checked submit request, ready to be queued."""

    problem: Any  # spec.problem.Problem
    solution: Solution | None
    workloads: tuple
    config: RunConfig


def parse_submit(body: Any, base: RunConfig, problems_folder: Path) -> SubmitRequest:
    """The request in `body` (decoded JSON), or BadRequest naming what is wrong."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object", ["body"])
    unknown = sorted(set(body) - TOP_FIELDS)
    if unknown:
        raise BadRequest(f"unknown field(s) {unknown}; known: {sorted(TOP_FIELDS)}", unknown)
    if "problem" not in body:
        raise BadRequest("'problem' is required: a path on the server, or {definition, workloads}", ["problem"])
    problem = _problem(body["problem"], problems_folder)
    solution = _solution(body.get("solution"), problem)
    config = _config(body.get("options"), base)
    uuids = body.get("workloads")
    if uuids is not None and (not isinstance(uuids, list) or not all(isinstance(u, str) for u in uuids)):
        raise BadRequest("'workloads' must be a list of workload uuids", ["workloads"])
    job = make_job(problem, solution, config.max_workloads, set(uuids) if uuids is not None else None)
    if uuids is not None and len(job.workloads) < min(len(set(uuids)), config.max_workloads or len(uuids)):
        missing = sorted(set(uuids) - {w.uuid for w in problem.workloads})
        raise BadRequest(f"workloads not in problem {problem.name}: {missing[:5]}", ["workloads"])
    if not job.workloads:
        raise BadRequest(f"problem {problem.name} has no workloads to run", ["workloads"])
    _check_names(problem, solution)
    return SubmitRequest(problem, solution, job.workloads, config)


def _check_names(problem, solution: Solution | None) -> None:
    """Names that could be read as paths, and blob paths that leave their data root, refused before queueing."""
    named = [("problem.definition.name", problem.name)] + [("problem.workloads.uuid", w.uuid) for w in problem.workloads]
    named += [("solution.name", solution.name)] if solution is not None else []
    bad = [(where, name) for where, name in named if unsafe_name(name)]
    blobs = [(w.uuid, source.path) for w in problem.workloads for source in w.inputs.values()
             if source.kind == "safetensors" and source.path]
    bad += [("problem.workloads.inputs.path", path) for _, path in blobs if _leaves_root(path)]
    if bad:
        raise BadRequest(f"{bad[0][0]} {bad[0][1][:80]!r} could name a file outside its place (a separator, a control "
                         f"character, '..', only dots, or an absolute path)", sorted({where for where, _ in bad}))


def _leaves_root(path: str) -> bool:
    """Whether a blob path sent by content is absolute, climbs ('..'), or names no file (the published data's
    paths are relative to a data root)."""
    parts = path.replace("\\", "/").split("/")
    return path.startswith(("/", "\\")) or ".." in parts or set(path) <= {".", "/"} or "\x00" in path


def _problem(value: Any, folder: Path):
    if isinstance(value, str):
        value = {"path": value}
    if not isinstance(value, dict):
        raise BadRequest("'problem' must be a path or an object", ["problem"])
    if "path" in value:
        extra = sorted(set(value) - {"path"})
        if extra or not isinstance(value["path"], str):
            raise BadRequest("'problem.path' must be a string, alone", ["problem.path"] + [f"problem.{k}" for k in extra])
        return _load(Path(value["path"]), "problem.path")
    unknown = sorted(set(value) - {"definition", "workloads", "baseline"})
    missing = [k for k in ("definition", "workloads") if k not in value]
    if unknown or missing:
        raise BadRequest(f"'problem' needs 'path', or 'definition' and 'workloads' (unknown: {unknown}, missing: "
                         f"{missing})", [f"problem.{k}" for k in unknown + missing])
    if not isinstance(value["definition"], dict):
        raise BadRequest("'problem.definition' must be an object (definition.json)", ["problem.definition"])
    workloads = value["workloads"]
    if not isinstance(workloads, list) or not all(isinstance(w, dict) for w in workloads):
        raise BadRequest("'problem.workloads' must be a list of objects (workload.jsonl's lines)", ["problem.workloads"])
    baseline = value.get("baseline")
    if baseline is not None and not isinstance(baseline, str):
        raise BadRequest("'problem.baseline' must be the baseline's source text", ["problem.baseline"])
    files = {"definition.json": json.dumps(value["definition"], indent=1),
             "workload.jsonl": "".join(json.dumps(w) + "\n" for w in workloads)}
    if baseline is not None:
        files[BASELINE_FILE] = baseline
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:20]
    target = folder / digest
    # one request at a time checks, rewrites and reads the folder: a rewrite that removed it while another
    # request read it made that request's problem vanish ("workload.jsonl does not exist")
    with _STAGING:
        if not _holds(target, files):  # new, or changed since it was written: (re)written whole
            staging = folder / f".{digest}.{secrets.token_hex(4)}.tmp"
            staging.mkdir(parents=True)
            for name, text in files.items():
                (staging / name).write_text(text)
            if target.exists():
                shutil.rmtree(target, ignore_errors=True)
            try:
                staging.rename(target)
            except OSError:  # another request wrote the same content meanwhile
                shutil.rmtree(staging, ignore_errors=True)
        return _load(target, "problem.definition")


_STAGING = threading.Lock()


def _holds(folder: Path, files: dict[str, str]) -> bool:
    """Whether `folder` holds exactly `files`: a problem written earlier is used only as it was sent (a
    solution that got past the sandbox and wrote into it would otherwise change later verdicts)."""
    try:
        return sorted(p.name for p in folder.iterdir()) == sorted(files) and \
            all((folder / name).read_text() == text for name, text in files.items())
    except OSError:
        return False


def _load(path: Path, field_name: str):
    try:
        return load_problem(path)
    except SpecError as exc:
        raise BadRequest(f"{field_name}: {exc}", [field_name]) from None


def _solution(value: Any, problem) -> Solution | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest("'solution' must be an object: {source, filename} or a solution JSON", ["solution"])
    try:
        if "source" in value:
            extra = sorted(set(value) - {"source", "filename"})
            if extra:
                raise BadRequest(f"unknown solution field(s) {extra}", [f"solution.{k}" for k in extra])
            source, filename = value["source"], value.get("filename", "solution.py")
            if not isinstance(source, str) or not isinstance(filename, str):
                raise BadRequest("'solution.source' and 'solution.filename' must be strings",
                                 ["solution.source", "solution.filename"])
            solution = solution_from_source(filename, source, problem.definition)
        else:
            solution = Solution.from_dict(value)
    except SpecError as exc:
        raise BadRequest(f"solution: {exc}", ["solution"]) from None
    if solution.definition != problem.name:
        raise BadRequest(f"the solution is for problem {solution.definition!r}, not {problem.name!r}", ["solution"])
    return solution


def _config(options: Any, base: RunConfig) -> RunConfig:
    if options is None:
        return base
    if not isinstance(options, dict):
        raise BadRequest("'options' must be an object of run options (RunConfig fields)", ["options"])
    fixed = sorted(k for k in options if k in SERVICE_OPTIONS and options[k] != getattr(base, k))
    if fixed:
        raise BadRequest(f"{fixed} are the service's (fixed when it started, or not a run option); a submission "
                         f"cannot change them",
                         [f"options.{k}" for k in fixed])
    wrong = [k for k, v in options.items() if k in OPTION_TYPES and not _fits(v, OPTION_TYPES[k])]
    if wrong:
        raise BadRequest(f"option(s) of the wrong type: {', '.join(f'{k} ({OPTION_TYPES[k]})' for k in wrong)}",
                         [f"options.{k}" for k in wrong])
    outside = sorted(k for k, v in options.items() if _out_of_range(k, v))
    if outside:
        raise BadRequest(f"option(s) out of range (0 to {MAX_OPTION_NUMBER}, finite): {outside}",
                         [f"options.{k}" for k in outside])
    try:
        return configure(base, **{k: v for k, v in options.items() if k not in SERVICE_OPTIONS})
    except (SpecError, TypeError, ValueError) as exc:
        named = [f"options.{k}" for k in options if k in str(exc) or k.replace("_", "-") in str(exc)]
        names = named or ([f"options.{k}" for k in options] if len(options) == 1 else ["options"])
        raise BadRequest(f"options: {exc}", names) from None
