"""Published datasets into problem folders: `solbench pull nvidia/SOL-ExecBench`.

The dataset has one parquet file per subset (L1, L2, Quant, FlashInfer-Bench) with one row per problem;
`axes`, `inputs`, `outputs` and `workloads` are JSON strings. Each row becomes
`<out>/<subset>/<name>/definition.json` + `workload.jsonl`, the layout the runner discovers.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from solbench.extract import hub
from solbench.spec.definition import Definition
from solbench.spec.errors import SpecError
from solbench.spec.workload import Workload

DEFAULT_REPO = "nvidia/SOL-ExecBench"
KNOWN_SUBSETS = ("L1", "L2", "Quant", "FlashInfer-Bench")
_JSON_COLUMNS = ("axes", "inputs", "outputs")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


@dataclass
class PullResult:
    written: dict[str, list[Path]] = field(default_factory=dict)  # subset -> problem folders


def subset_of(path: str) -> str:
    """The subset a dataset file belongs to, from its path (`L1/train-0.parquet`, `data/Quant-0.parquet`)."""
    for part in reversed(Path(path).parts):
        for subset in KNOWN_SUBSETS:
            if part == subset or part.startswith(subset + "-") or part.startswith(subset + "_") \
                    or part.startswith(subset + "."):
                return subset
    return Path(path).parent.name or Path(path).stem


def download(repo_id: str, subsets: list[str] | None = None, *, local_only: bool | None = None
             ) -> dict[str, list[Path]]:
    """Parquet files of the dataset by subset (huggingface-hub, split `train`).

    `local_only` reads the local HuggingFace cache without asking the hub; by default it is set when the
    hub is not reachable (probed once per process), so that an offline machine does not wait on retries."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise SpecError("`solbench pull` needs huggingface-hub: pip install huggingface-hub pyarrow") from None
    reach = hub.reach()
    if local_only is None:
        local_only = not reach.online
    try:
        root = Path(snapshot_download(repo_id, repo_type="dataset", allow_patterns=["*.parquet", "**/*.parquet"],
                                      local_files_only=local_only))
    except Exception as exc:  # noqa: BLE001 - offline, unknown repo, gated: one clear message
        why = f"it is not in the local HuggingFace cache and the hub cannot be asked ({reach.reason})" \
            if local_only and not reach.online else f"the HuggingFace hub refused it ({type(exc).__name__})"
        raise SpecError(f"cannot download {repo_id}: {why}. Convert a local copy with --from-parquet FILE "
                        f"[FILE ...]") from None
    found: dict[str, list[Path]] = {}
    for path in sorted(root.rglob("*.parquet")):
        rel = str(path.relative_to(root))
        if "train" not in rel and "data" not in rel and subset_of(rel) not in KNOWN_SUBSETS:
            continue
        found.setdefault(subset_of(rel), []).append(path)
    if subsets:
        missing = [s for s in subsets if s not in found]
        if missing:
            raise SpecError(f"{repo_id} has no subset {missing}; it has {sorted(found)}")
        found = {s: found[s] for s in subsets}
    return found


def read_rows(path: Path) -> list[dict]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise SpecError("reading parquet needs pyarrow: pip install pyarrow") from None
    return pq.read_table(path).to_pylist()


def convert_row(row: dict) -> tuple[dict, list[dict]]:
    """One dataset row -> (definition dict, workload dicts), validated by the spec loaders."""
    name = row.get("name")
    if not isinstance(name, str) or not _SAFE_NAME.match(name):
        raise SpecError(f"row has an unusable problem name {name!r}")
    definition: dict = {"name": name}
    if row.get("hf_id"):
        definition["hf_id"] = row["hf_id"]
    definition["description"] = row.get("description")
    for column in _JSON_COLUMNS:
        value = row.get(column)
        definition[column] = json.loads(value) if isinstance(value, str) else value
    inputs = definition.pop("inputs")
    outputs = definition.pop("outputs")
    definition["custom_inputs_entrypoint"] = row.get("custom_inputs_entrypoint") or None
    definition["inputs"], definition["outputs"] = inputs, outputs
    definition["reference"] = row.get("reference")
    raw = row.get("workloads")
    items = json.loads(raw) if isinstance(raw, str) else (raw or [])
    workloads = [json.loads(w) if isinstance(w, str) else w for w in items]
    try:
        parsed = Definition.from_dict(definition)
        for w in workloads:
            Workload.from_dict(w)
    except SpecError as exc:
        raise SpecError(f"problem {name}: {exc}") from None
    del parsed
    return definition, workloads


def write_problem(folder: Path, definition: dict, workloads: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "definition.json").write_text(json.dumps(definition, indent=4) + "\n")
    (folder / "workload.jsonl").write_text("".join(json.dumps(w) + "\n" for w in workloads))


def convert(files: dict[str, list[Path]], out: Path) -> PullResult:
    result = PullResult()
    for subset, paths in files.items():
        folders = result.written.setdefault(subset, [])
        for path in paths:
            for row in read_rows(path):
                definition, workloads = convert_row(row)
                folder = out / subset / definition["name"]
                write_problem(folder, definition, workloads)
                folders.append(folder)
    return result


def pull(repo_id: str, out: Path, subsets: list[str] | None = None) -> PullResult:
    return convert(download(repo_id, subsets), out)
