"""docs/architecture.md names every package and module of solbench/, so that it stays a true map.

A module counts as named when its package's row of the table names it in backticks (`timer`, or a
phrase such as `timing/timer.py`), or when its path (`timing/timer.py`) appears anywhere in the page.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "solbench"
DOC = REPO / "docs" / "architecture.md"


def package_rows(text: str) -> dict[str, str]:
    """Top-level package (or module, `api.py`) -> the table row that describes it."""
    rows = {}
    for line in text.splitlines():
        match = re.match(r"\|\s*`([^`]+)`", line)
        if match:
            for name in re.findall(r"`(\w+/|\w+\.py)`", line.split("|")[1]):
                rows[name.rstrip("/").removesuffix(".py")] = line
    return rows


def named_in_backticks(row: str) -> set[str]:
    return {word for span in re.findall(r"`([^`]*)`", row) for word in re.findall(r"\w+", span)}


def unnamed_modules(text: str) -> list[str]:
    rows = package_rows(text)
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if path.name in ("__init__.py", "__main__.py") and len(relative.parts) == 1:
            continue  # the package itself
        top = relative.parts[0].removesuffix(".py")
        if top not in rows:
            missing.append(f"{relative} (no row for {top})")
            continue
        if path.name in ("__init__.py", "__main__.py") or len(relative.parts) == 1:
            continue  # a package (or top-level module) is named by its row
        if path.stem not in named_in_backticks(rows[top]) and str(relative) not in text:
            missing.append(str(relative))
    return missing


def test_every_package_and_module_is_named():
    missing = unnamed_modules(DOC.read_text())
    assert not missing, f"docs/architecture.md does not name: {', '.join(missing)}"


@pytest.mark.parametrize("module", ["timing/timer.py", "check/numerics_flags.py"])
def test_a_module_left_out_is_found(module):
    package, stem = module.split("/")[0], Path(module).stem
    text = "\n".join(line.replace(f"`{stem}`", "") if line.startswith(f"| `{package}/`") else line
                     for line in DOC.read_text().splitlines())
    assert module in unnamed_modules(text.replace(module, ""))
