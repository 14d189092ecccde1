"""The environment for a child process that must import this checkout's solbench."""

from __future__ import annotations

import os
from pathlib import Path


def repo_env(root: Path, **extra: str) -> dict[str, str]:
    """os.environ with `root` first on PYTHONPATH, the caller's PYTHONPATH kept after it.

    Replacing PYTHONPATH instead drops packages that reach Python only through it (the GPU machine's wheels in
    /tmp/site, pydantic among them): the child then fails to import solbench and the test fails for a reason
    that is not its own."""
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    return env
