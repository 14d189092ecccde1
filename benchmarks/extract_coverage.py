"""How many official problems does `solbench extract` reach? Op-set containment, by model family.

    python benchmarks/extract_coverage.py [--official DIR] [--extracted DIR] [--families MD] [--jobs N]
                                          [--details] [--save FILE.json] [--cache FILE.json] [--with FILE.json]

Every official problem that names a model (`hf_id`) is compared with the extracted problems of THAT
model (the model ids an extracted problem records: `solbench.models[*].hf_id` and its `hf_id`). Each
problem's **op set** is recorded by `solbench.sol.op_set`: a dispatch-level recorder at one
decomposition level, core aten, over the reference run on meta tensors (the trace `solbench sol`
prices), on the workload with the smallest axes. Views, copies, casts and allocations are left out.

- **contained**: the official problem's ops on data (those with an operand that depends on its inputs;
  every op where it has none) are a subset of some extracted problem's op set of the same model and
  direction (a problem is a backward one when its name says `backward`). Masks and tables built from
  shapes alone (`arange`, a causal `triu`, a RoPE table of positions 0..n) are constants a kernel may
  precompute: an official reference that builds them inline is not asking for more work on its inputs;
- **same boundary**: the whole op sets are equal (counted apart; also contained).

`--with FILE` adds the verdicts an earlier run saved: re-extract a few models (with `--backward`, say) into
a new folder, and count what either extraction contains.

Op sets are cached (`--cache`) by the definition's content and the recorder's source, so a rerun after
a new extraction traces only what changed.

Quantised problems (the dataset's `Quant` category, or an fp8 / fp4 input or output) are counted apart:
extraction emits none yet.
Families come from `solbench/extract/data/models.json`'s `kind` where it has one, else from the family
column of the official model-config notes (`--families`, a Markdown table with `hf_id | family`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _shared(*parts: str) -> Path:
    """`$SOLBENCH_SHARED/...`, else `../shared/...` beside the checkout (or beside a folder above it)."""
    if os.environ.get("SOLBENCH_SHARED"):
        return Path(os.environ["SOLBENCH_SHARED"]).joinpath(*parts)
    for base in ROOT.parents:
        if (base / "shared" / parts[0]).exists():
            return base.joinpath("shared", *parts)
    return ROOT.parent.joinpath("shared", *parts)


DEFAULT_OFFICIAL = _shared("sol-execbench")
DEFAULT_EXTRACTED = ROOT / "problem_defs" / "hf"
DEFAULT_FAMILIES = _shared("notes", "official-model-configs.md")
RECORDER_SOURCE = ROOT / "solbench" / "sol" / "op_set.py"
MODELS_JSON = ROOT / "solbench" / "extract" / "data" / "models.json"
FAMILIES = ("dense LLM", "MoE", "VL", "diffusion", "audio", "SSM/hybrid", "vision")
FAMILY_NAMES = {"llm": "dense LLM", "dense llm": "dense LLM", "dense": "dense LLM", "moe": "MoE", "vl": "VL",
                "vl/omni": "VL", "omni": "VL", "diffusion": "diffusion", "audio": "audio", "ssm/hybrid": "SSM/hybrid",
                "ssm": "SSM/hybrid", "hybrid": "SSM/hybrid", "vision": "vision"}


@dataclass
class Problem:
    path: str
    name: str
    models: list[str]  # lower-cased model ids
    quantized: bool
    backward: bool
    ops: list[str] | None = None  # every op its reference runs
    data_ops: list[str] | None = None  # those with an operand that depends on its inputs
    error: str | None = None


@dataclass
class Verdict:
    problem: str
    model: str
    family: str
    quantized: bool
    extracted: int = 0  # extracted problems of this model
    contained_in: list[str] = field(default_factory=list)
    same_boundary: list[str] = field(default_factory=list)
    reason: str = ""


def read_problem(path: Path) -> Problem:
    data = json.loads((path / "definition.json").read_text())
    ids = [data.get("hf_id")] + [m.get("hf_id") for m in (data.get("solbench") or {}).get("models", [])]
    dtypes = [t.get("dtype", "") for t in (*data.get("inputs", {}).values(), *data.get("outputs", {}).values())]
    quantized = path.parent.name == "Quant" or any(d.startswith(("float8", "float4")) for d in dtypes)
    return Problem(str(path), data["name"], sorted({i.lower() for i in ids if i}), quantized,
                   "backward" in data["name"].lower())


def cache_key(problem: Problem) -> str:
    """The definition's and workloads' content plus the recorder's source: any change traces anew."""
    folder = Path(problem.path)
    digest = hashlib.sha256()
    for part in (folder / "definition.json", folder / "workload.jsonl", RECORDER_SOURCE):
        digest.update(part.read_bytes() if part.is_file() else b"-")
    return digest.hexdigest()


def record_ops(problem: Problem) -> Problem:
    """The problem's core-aten op set on its smallest workload (in a pool process)."""
    from solbench.sol.op_set import record_op_sets
    from solbench.spec.problem import load_problem

    try:
        loaded = load_problem(Path(problem.path))
        workload = min(loaded.workloads, key=lambda w: (sum(v for v in w.axes.values() if isinstance(v, int)), w.uuid))
        sets = record_op_sets(loaded.definition, workload.axes, workload.scalar_values())
        problem.ops, problem.data_ops = sorted(sets.all), sorted(sets.data)
    except Exception as exc:  # noqa: BLE001 - a problem that cannot be traced is reported, not fatal
        problem.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
    return problem


def read_families(markdown: Path | None) -> dict[str, str]:
    """Model id (lower case) -> family: models.json `kind` first, then the notes' Markdown table."""
    families: dict[str, str] = {}
    if markdown is not None and markdown.is_file():
        for line in markdown.read_text().splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) >= 2 and "/" in cells[0] and cells[1].lower() in FAMILY_NAMES:
                families[cells[0].lower()] = FAMILY_NAMES[cells[1].lower()]
    if MODELS_JSON.is_file():
        for model_id, entry in json.loads(MODELS_JSON.read_text()).get("models", {}).items():
            kind = str(entry.get("kind", "")).lower() if isinstance(entry, dict) else ""
            if kind in FAMILY_NAMES:
                families[model_id.lower()] = FAMILY_NAMES[kind]
    return families


def judge(official: Problem, extracted: list[Problem], family: str) -> Verdict:
    verdict = Verdict(official.name, official.models[0], family, official.quantized)
    mine = [e for e in extracted if official.models[0] in e.models]
    verdict.extracted = len(mine)
    if official.error:
        verdict.reason = f"official reference not traced: {official.error}"
        return verdict
    if not mine:
        verdict.reason = "no extracted problem of this model"
        return verdict
    want = set(official.data_ops or official.ops)  # its work on its inputs (all of it if it has none)
    same_direction = [e for e in mine if e.ops is not None and e.backward == official.backward]
    verdict.contained_in = sorted(e.name for e in same_direction if want <= set(e.ops))
    verdict.same_boundary = sorted(e.name for e in same_direction if set(official.ops) == set(e.ops))
    if not verdict.contained_in:
        if not same_direction:
            verdict.reason = f"no extracted {'backward' if official.backward else 'forward'} problem of this model"
        else:
            nearest = min(same_direction, key=lambda e: (len(want - set(e.ops)), e.name))
            verdict.reason = f"nearest {nearest.name} lacks {', '.join(sorted(want - set(nearest.ops)))}"
    return verdict


def union(verdicts: list[Verdict], earlier: list[Verdict]) -> list[Verdict]:
    """Each official problem's verdict, contained when either run contained it (the earlier verdict is
    kept where only it found the problem: its extraction is not in this run's folder)."""
    before = {(v.problem, v.model): v for v in earlier}
    merged = []
    for verdict in verdicts:
        old = before.get((verdict.problem, verdict.model))
        if old is not None and old.contained_in and not verdict.contained_in:
            verdict = replace(old, extracted=max(old.extracted, verdict.extracted))
        elif old is not None:
            verdict = replace(verdict, extracted=max(old.extracted, verdict.extracted))
        merged.append(verdict)
    return merged


def table(verdicts: list[Verdict]) -> str:
    rows = ["| family | problems (not quantised) | model extracted | contained | same boundary | quantised |",
            "|---|---|---|---|---|---|"]
    for family in (*FAMILIES, "unknown"):
        mine = [v for v in verdicts if v.family == family]
        if not mine:
            continue
        rows.append(_row(family, mine))
    rows.append(_row("**all**", verdicts))
    return "\n".join(rows)


def _row(label: str, verdicts: list[Verdict]) -> str:
    plain = [v for v in verdicts if not v.quantized]
    quant = [v for v in verdicts if v.quantized]
    return (f"| {label} | {len(plain)} | {sum(v.extracted > 0 for v in plain)} | {sum(bool(v.contained_in) for v in plain)}"
            f" | {sum(bool(v.same_boundary) for v in plain)} | {sum(bool(v.contained_in) for v in quant)} of {len(quant)} |")


def coverage(official_dir: Path, extracted_dir: Path, families_md: Path | None, jobs: int,
             cache_file: Path | None = None) -> list[Verdict]:
    officials = [read_problem(p.parent) for p in sorted(official_dir.glob("*/*/definition.json"))]
    officials = [p for p in officials if p.models]
    wanted = {p.models[0] for p in officials}
    extracted = [read_problem(p.parent) for p in sorted(extracted_dir.glob("**/definition.json"))]
    extracted = [e for e in extracted if wanted & set(e.models)]  # only the models an official problem names
    done = _record_all(officials + extracted, jobs, cache_file)
    officials, extracted = done[:len(officials)], done[len(officials):]
    families = read_families(families_md)
    return [judge(o, extracted, families.get(o.models[0], "unknown")) for o in officials]


def _record_all(problems: list[Problem], jobs: int, cache_file: Path | None) -> list[Problem]:
    """Every problem's op set, from the cache where its key is there; new results are added to it as they
    come (a run cut short keeps what it traced)."""
    cache = json.loads(cache_file.read_text()) if cache_file is not None and cache_file.is_file() else {}
    keys = [cache_key(p) for p in problems]
    todo = [(p, k) for p, k in zip(problems, keys) if k not in cache]
    pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) if jobs > 1 else None
    traced = pool.map(record_ops, [p for p, _ in todo], chunksize=1) if pool else map(record_ops, [p for p, _ in todo])
    try:
        for number, ((_, key), problem) in enumerate(zip(todo, traced), 1):
            cache[key] = {"ops": problem.ops, "data_ops": problem.data_ops, "error": problem.error}
            if cache_file is not None and (number % 20 == 0 or number == len(todo)):
                cache_file.write_text(json.dumps(cache, sort_keys=True) + "\n")
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    for problem, key in zip(problems, keys):
        problem.ops, problem.data_ops, problem.error = (cache[key][k] for k in ("ops", "data_ops", "error"))
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--official", type=Path, default=DEFAULT_OFFICIAL, help="the official dataset folder")
    parser.add_argument("--extracted", type=Path, default=DEFAULT_EXTRACTED,
                        help="extracted problems (problem_defs/hf, or a `solbench extract` output folder)")
    parser.add_argument("--families", type=Path, default=DEFAULT_FAMILIES,
                        help="Markdown table hf_id | family (used where models.json has no `kind`)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--details", action="store_true", help="one line per official problem with its reason")
    parser.add_argument("--save", type=Path, help="write every verdict as JSON")
    parser.add_argument("--cache", type=Path, help="op sets by content (read, then updated): reruns trace only "
                                                    "what changed")
    parser.add_argument("--with", dest="earlier", type=Path, action="append", default=[], metavar="FILE",
                        help="verdicts an earlier run saved (--save) over other extractions: an official problem "
                             "counts as contained when this run or any of those finds it (re-extract a few models, "
                             "keep the rest)")
    args = parser.parse_args(argv)
    for folder in (args.official, args.extracted):
        if not folder.is_dir():
            print(f"error: {folder} is not a folder", file=sys.stderr)
            return 2
    started = time.monotonic()
    verdicts = coverage(args.official, args.extracted, args.families, max(1, args.jobs), args.cache)
    for earlier in args.earlier:
        verdicts = union(verdicts, [Verdict(**v) for v in json.loads(earlier.read_text())])
    plain = [v for v in verdicts if not v.quantized]
    print(f"official problems naming a model: {len(verdicts)} ({len(plain)} not quantised); "
          f"extracted from {args.extracted}; op sets: core aten, views/copies/allocations left out")
    print(table(verdicts))
    print(f"contained: {sum(bool(v.contained_in) for v in plain)} of {len(plain)} not quantised "
          f"({sum(bool(v.contained_in) for v in verdicts)} of {len(verdicts)} in all); "
          f"{time.monotonic() - started:.0f} s")
    if args.details:
        for v in sorted(verdicts, key=lambda v: (v.family, v.problem)):
            where = v.same_boundary[0] + " (same boundary)" if v.same_boundary else \
                (v.contained_in[0] if v.contained_in else v.reason)
            print(f"  {v.family:10s} {v.problem:60s} {v.model:45s} {where}")
    if args.save:
        args.save.write_text(json.dumps([asdict(v) for v in verdicts], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
