"""The package stays easy to read: small modules, short functions, imports at the top.

The limits hold for every module of `solbench/`, so that none becomes the hub that everything has
to be read through again. An import inside a function is allowed only with a comment saying why (an
optional dependency, or a heavy import kept off a fast path); that rule holds for the process-boundary
packages (`orchestrator/`, `worker/`, `protocol/`), where every stage of an evaluation meets.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("orchestrator", "worker", "protocol")  # imports inside functions must say why
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80


def all_modules() -> list[Path]:
    return sorted((REPO / "solbench").rglob("*.py"))


def modules() -> list[Path]:
    return sorted(p for name in PACKAGES for p in (REPO / "solbench" / name).rglob("*.py"))


def test_the_packages_exist():
    assert {p.parent.name for p in modules()} >= set(PACKAGES)
    assert {p.parent.name for p in all_modules()} >= {"timing", "check", "cli", "sol", "spec", "report", "extract"}


@pytest.mark.parametrize("path", all_modules(), ids=lambda p: str(p.relative_to(REPO)))
def test_module_size(path):
    text = path.read_text()
    lines = text.count("\n")
    assert lines <= MAX_MODULE_LINES, f"{path.name}: {lines} lines (limit {MAX_MODULE_LINES}): split it by idea"


def test_no_function_anywhere_in_the_package_is_too_long():
    long = [f"{path.relative_to(REPO)}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in sorted((REPO / "solbench").rglob("*.py"))
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(REPO)))
def test_imports_inside_functions_say_why(path):
    source = path.read_text().splitlines()
    tree = ast.parse("\n".join(source))
    unexplained = []
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and "#" not in source[node.lineno - 1]:
                unexplained.append(f"line {node.lineno}: {source[node.lineno - 1].strip()}")
    assert not unexplained, f"{path.name}: imports inside functions without a comment saying why: {unexplained}"
