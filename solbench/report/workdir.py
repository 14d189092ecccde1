"""`.solbench/`: where a command's outputs go when no `-o` names a place.

The folder carries its own `.gitignore` (`*`), as `.pytest_cache/` does, so that what solbench leaves in a
user's working directory never shows in their `git status`, whether or not their repository ignores it.
"""

from __future__ import annotations

from pathlib import Path

FOLDER_NAME = ".solbench"
_GITIGNORE = "# Written by solbench: everything here is solbench's own output.\n*\n"


def solbench_folder(root: Path | None = None) -> Path:
    """`.solbench/` under `root` (default: the working directory, named relatively, as messages show it), made
    with its `.gitignore` if need be."""
    folder = root / FOLDER_NAME if root is not None else Path(FOLDER_NAME)
    folder.mkdir(parents=True, exist_ok=True)
    ignore = folder / ".gitignore"
    if not ignore.exists():
        ignore.write_text(_GITIGNORE)
    return folder
