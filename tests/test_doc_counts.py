"""Numbers the docs give about what solbench ships are what it ships (issue 48: docs that cannot drift).

Each test reads the number from the sentence a user reads and counts the thing itself: the shipped Triton
solutions in the README's main-job paragraph, the example-solutions table, the models `solbench extract`
knows and the families it expands, the workloads of the shipped extracted problems. (The main job's counts are
`tests/test_readme_main_job.py`'s, docs/ci.md's `tests/plugin/test_ci_doc_counts.py`'s.)
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from solbench import languages
from solbench.extract import configs, emit
from solbench.orchestrator.jobs import solution_files
from solbench.spec.solution import load_solution

REPO = Path(__file__).resolve().parents[1]
WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9}
# README's example table: column header -> the language its solutions are written in
COLUMNS = {"PyTorch": "pytorch", "Triton": "triton", "CUDA C++": "cuda_cpp", "CuTe DSL": "cute_dsl",
           "cuDNN frontend": "cudnn_frontend", "CUTLASS": "cutlass", "cuDNN": "cudnn", "cuBLAS": "cublas"}


def text(name: str) -> str:
    return " ".join((REPO / name).read_text().split())  # sentences whole, whatever the line breaks


def number(word: str) -> int:
    return int(word) if word.isdigit() else WORDS[word]


def shipped_solutions() -> dict[Path, tuple[str, str]]:
    """Each shipped solution file -> (its problem, its language)."""
    found = {}
    for path in solution_files([REPO / "solutions"]):
        solution = load_solution(path)
        found[path] = (solution.definition, solution.spec.languages[0])
    return found


def test_readme_counts_the_shipped_triton_solutions_and_those_a_cpu_cannot_judge():
    said = re.search(r"of the (\w+) shipped Triton solutions, the (\w+) fp32 layernorm kernels run in the "
                     r"interpreter; the (\w+) bf16 ones are SKIPPED", text("README.md"))
    assert said, "README.md no longer counts the shipped Triton solutions"
    total, interpreted, skipped = map(number, said.groups())
    wrong = languages.get("triton").cpu_wrong_dtypes  # what Triton's CPU interpreter computes wrongly
    triton = [problem for problem, language in shipped_solutions().values() if language == "triton"]
    dtypes = {p: {t["dtype"] for t in json.loads((REPO / "problem_defs" / "core" / p / "definition.json").read_text())
                  ["inputs"].values()} for p in set(triton)}
    cannot = [p for p in triton if dtypes[p] & set(wrong)]
    assert (total, interpreted, skipped) == (len(triton), len(triton) - len(cannot), len(cannot))
    assert all(p.startswith("layernorm_fp32") for p in triton if p not in cannot)


def test_readme_example_table_names_every_shipped_solution_in_its_language_column():
    lines = (REPO / "README.md").read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| problem | PyTorch |"))
    columns = [c.strip() for c in lines[header].strip("|").split("|")]
    listed = {}
    for line in lines[header + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        for column, cell in zip(columns[1:], cells[1:], strict=True):
            for name in re.findall(r"`([^`]+)`", cell):
                listed[REPO / "solutions" / cells[0] / name.rstrip("/")] = (cells[0], COLUMNS[column])
    shipped = {(path.parent if path.name == "solution.json" else path): what
               for path, what in shipped_solutions().items()}
    assert listed == shipped


def test_extract_doc_counts_the_known_models_and_the_families():
    doc = text("docs/extract.md")
    known, earlier = map(int, re.search(r"\((\d+) models: every model of the official dataset and the (\d+) "
                                        r"earlier ones\)", doc).groups())
    on_disk = emit.models_on_disk(REPO / "problem_defs")
    assert (known, earlier) == (len(configs.shipped_models()), len(on_disk))
    assert int(re.search(r"today the (\d+) models whose problems `problem_defs/hf` ships", doc).group(1)) == len(on_disk)
    families = dict(re.findall(r"`([\w.-]+/[\w.-]+)` (?:is )?(\d+) (?:known )?[\w. -]*?models", doc))
    assert set(families) >= {"Qwen/Qwen3", "meta-llama/Llama-3", "openai/gpt-oss", "black-forest-labs/FLUX.1",
                             "Qwen/Qwen3-VL"}, families
    for family, count in families.items():
        assert len(configs.select(family).model_ids) == int(count), family
    place, total, model = re.search(r"`\[(\d+)/(\d+)\] ([\w./-]+)`", doc).groups()
    members = configs.select("Qwen/Qwen3").model_ids
    assert (int(place), int(total)) == (members.index(model) + 1, len(members))


def test_extract_doc_workload_range_holds_for_the_shipped_problems():
    doc = text("docs/extract.md")
    ranges = {False: tuple(map(int, re.search(r"Workloads: (\d+)-(\d+) per problem of a family", doc).groups())),
              True: tuple(map(int, re.search(r"\(Generic\s+capture: (\d+)-(\d+) workloads\)", doc).groups()))}
    counts = {}
    for path in (REPO / "problem_defs" / emit.SUBDIR).glob("*/workload.jsonl"):
        definition = json.loads((path.parent / "definition.json").read_text())
        generic = "module_class" in definition.get("solbench", {}).get("hints", {})
        counts[path.parent.name] = (generic, len(path.read_text().splitlines()))
    assert counts and all(ranges[g][0] <= n <= ranges[g][1] for g, n in counts.values()), \
        {p: n for p, (g, n) in counts.items() if not ranges[g][0] <= n <= ranges[g][1]}
