"""Write problems to disk deterministically, share identical problems across models, and check drift.

Layout: `<problems>/hf/<name>/definition.json`, `<problems>/hf/<name>/workload.jsonl` and
`<references>/hf/<name>.py`, where the `.py` file is exactly the definition's `reference` string. Under one
output root the two are `problem_defs/` and `reference_impls/`, a checkout's layout: a baseline saved beside a
reference (`reference_impls/hf/<name>.baseline.py`) is then found for its problem (`spec.problem.find_baseline`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from solbench.extract import workloads as wl
from solbench.extract.configs import ModelConfig
from solbench.extract.draft import Draft
from solbench.spec.errors import SpecError
from solbench.spec.problem import BASELINE_FILE, BASELINE_SUFFIX

SUBDIR = "hf"
PROBLEMS_FOLDER, REFERENCES_FOLDER = "problem_defs", "reference_impls"  # under an output root, as in a checkout


@dataclass(frozen=True)
class _Recorded:
    """A model listed by an earlier run, whose config hash is carried over as recorded."""

    model_id: str
    config_hash: str


@dataclass
class Problem:
    """One emitted problem and every model it was extracted from."""

    draft: Draft
    models: dict[str, ModelConfig | _Recorded] = field(default_factory=dict)

    def provenance(self) -> dict:
        import transformers

        import solbench

        models = [{"hf_id": m, "config_sha256": self.models[m].config_hash} for m in sorted(self.models)]
        out = {"extracted_by": "solbench extract", "solbench_version": solbench.__version__,
               "transformers_version": transformers.__version__, "models": models}
        for library, version in sorted(self.draft.versions.items()):  # generic drafts: diffusers, torch
            if library != "transformers":
                out[f"{library}_version"] = version
        return out

    def files(self) -> dict[str, str]:
        """Relative path -> content, for the problem folder and the reference file."""
        definition = self.draft.definition(self.provenance())
        lines = [json.dumps(w) for w in wl.workloads(self.draft)]
        name = self.draft.name
        return {f"problems/{SUBDIR}/{name}/definition.json": json.dumps(definition, indent=2) + "\n",
                f"problems/{SUBDIR}/{name}/workload.jsonl": "\n".join(lines) + "\n",
                f"references/{SUBDIR}/{name}.py": definition["reference"]}


def merge(per_model: list[tuple[ModelConfig, list[Draft]]]) -> dict[str, Problem]:
    """Problems by name; a name reached from two models must mean the same computation."""
    problems: dict[str, Problem] = {}
    for config, drafts in per_model:
        for draft in drafts:
            known = problems.get(draft.name)
            if known is None:
                problems[draft.name] = known = Problem(draft)
            elif _identity(known.draft) != _identity(draft):
                raise SpecError(f"problem {draft.name!r} differs between models "
                                f"{sorted(known.models)} and {config.model_id}; its name must say how")
            known.models[config.model_id] = config
    return dict(sorted(problems.items()))


def _identity(draft: Draft) -> tuple:
    return (draft.reference(), json.dumps(draft.axes, sort_keys=True), [a.to_dict() for a in draft.inputs],
            [a.to_dict() for a in draft.outputs], draft.shapes, draft.tolerance_scale, draft.op_type)


def _absorb_existing(problem: Problem, problems_root: Path) -> None:
    """Keep models that an earlier run recorded for the same problem (single-model runs add, never drop)."""
    path = problems_root / SUBDIR / problem.draft.name / "definition.json"
    if not path.is_file():
        return
    try:
        old = json.loads(path.read_text())
    except json.JSONDecodeError:
        return
    for entry in old.get("solbench", {}).get("models", []):
        hf_id = entry.get("hf_id")
        if hf_id and hf_id not in problem.models:
            problem.models[hf_id] = _Recorded(hf_id, entry.get("config_sha256", ""))


@dataclass
class Written:
    """What `write` did, counted in problems: a problem is written when any of its files was created or
    changed, unchanged when every file already held this extraction; `paths` are all of their files."""

    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)


def write(problems: dict[str, Problem], problems_root: Path, references_root: Path, merge_existing: bool = True,
          on_skip: Callable[[str, str], None] | None = None) -> Written:
    """Write every problem; one whose files cannot be made is named to `on_skip(name, why)` and left out,
    so a single bad draft never costs the others (nothing of it is written)."""
    done = Written()
    for name, problem in problems.items():
        if merge_existing:
            _absorb_existing(problem, problems_root)
        try:
            files = problem.files()
        except Exception as exc:  # noqa: BLE001 - one problem's emit bug must not abort the whole write
            if on_skip is None:
                raise
            on_skip(name, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")
            continue
        changed = False
        for rel, content in files.items():
            path = _place(rel, problems_root, references_root)
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.is_file() or not same_extraction(path.read_text(), content):
                path.write_text(content)  # a file differing only in the tools' versions is left as it is
                changed = True
            done.paths.append(path)
        (done.written if changed else done.unchanged).append(name)
    return done


def _place(rel: str, problems_root: Path, references_root: Path) -> Path:
    kind, _, rest = rel.partition("/")
    return (problems_root if kind == "problems" else references_root) / rest


@dataclass
class Drift:
    missing: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.missing or self.changed or self.extra)


# Provenance that names the library versions, not what was extracted: a newer transformers that
# extracts the same problem is no drift (CI installs the newest release).
VERSION_KEYS = ("transformers_version", "solbench_version", "diffusers_version", "torch_version")


def same_extraction(on_disk: str, extracted: str) -> bool:
    """Whether a file on disk holds what the extractor writes now, version provenance aside."""
    if on_disk == extracted:
        return True
    try:
        old, new = json.loads(on_disk), json.loads(extracted)
    except ValueError:
        return False
    for data in (old, new):
        provenance = data.get("solbench") if isinstance(data, dict) else None
        if isinstance(provenance, dict):
            for key in VERSION_KEYS:
                provenance.pop(key, None)
    return old == new


def models_on_disk(problems_root: Path) -> list[str]:
    """The model ids the extracted problems under `problems_root` record (`solbench.models`), in order:
    what `--check` re-extracts when no model is named (the shipped set, however many models are known)."""
    found: dict[str, None] = {}
    for definition in sorted((problems_root / SUBDIR).glob("*/definition.json")):
        try:
            record = json.loads(definition.read_text()).get("solbench") or {}
        except (OSError, ValueError):
            continue  # an unreadable file is drift that `check` reports
        for model in record.get("models") or []:
            if isinstance(model, dict) and isinstance(model.get("hf_id"), str):
                found.setdefault(model["hf_id"], None)
    return list(found)


def check(problems: dict[str, Problem], problems_root: Path, references_root: Path, complete: bool = True) -> Drift:
    """Compare what the current code extracts with what is on disk (nothing is written)."""
    drift = Drift()
    expected: set[Path] = set()
    for problem in problems.values():
        if not complete:  # a partial check asks "would writing these models change anything?"
            _absorb_existing(problem, problems_root)
        for rel, content in problem.files().items():
            path = _place(rel, problems_root, references_root)
            expected.add(path.resolve())
            if not path.is_file():
                drift.missing.append(str(path))
            elif not same_extraction(path.read_text(), content):
                drift.changed.append(str(path))
    if complete:
        for root, pattern in ((problems_root / SUBDIR, "*/*"), (references_root / SUBDIR, "*.py")):
            if root.is_dir():
                for path in sorted(root.glob(pattern)):
                    shipped_baseline = path.name == BASELINE_FILE or path.name.endswith(BASELINE_SUFFIX)
                    if path.is_file() and path.resolve() not in expected and not shipped_baseline:
                        drift.extra.append(str(path))  # hand-written optimised baselines are not extracted
    return drift
