"""File suffixes have one home, the language registry: the spec, the job builder and the gate read them there."""

from __future__ import annotations

import ast
from pathlib import Path

from solbench import languages
from solbench.languages import Language, register
from solbench.orchestrator.jobs import solution_files

PACKAGE = Path(__file__).resolve().parents[2] / "solbench"
SOURCE_SUFFIXES = {".py", ".cu", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".cuh"}


def test_solution_files_are_json_python_and_each_languages_own_suffixes():
    assert languages.solution_file_suffixes() == (".json", ".py", ".cu")
    assert set(languages.bare_file_suffixes()) == SOURCE_SUFFIXES


def test_a_language_that_claims_a_suffix_makes_its_files_solutions(tmp_path):
    (tmp_path / "k.xyz").write_text("// solbench: problem=p\n")
    assert solution_files([tmp_path]) == []
    register(Language("test_xyz", lambda *a: None, compiled=True, suffixes=(".xyz",)))
    try:
        assert solution_files([tmp_path]) == [tmp_path / "k.xyz"]
    finally:
        languages._REGISTRY.pop("test_xyz")


def test_no_module_outside_the_registry_spells_a_source_suffix():
    spelled = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent.name == "languages":
            continue
        tree = ast.parse(path.read_text())
        in_fstrings = {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for part in node.values}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in SOURCE_SUFFIXES and id(node) not in in_fstrings:
                spelled.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.value!r}")
    assert not spelled, f"source suffixes outside solbench/languages: {spelled}"
