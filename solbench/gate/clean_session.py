"""`pytest --solbench` grades in a pytest session that the tree under test cannot configure.

pytest reads the tree's `pytest.ini`, `pyproject.toml`, `tox.ini` or `setup.cfg`, loads the plugins their
`addopts` name, and imports its `conftest.py` files, and any of them can rewrite an outcome. So when
`--solbench` is on the command line, the session the user started does not gate: at its first hook that
follows the plugins' loading and precedes the conftests', it starts a second pytest in an isolated
interpreter (`gate/isolated.py`) with an empty configuration file of solbench's own, `--noconftest`, the
rootdir fixed, no cache, and the user's own command line, and ends with that session's exit status
(`os._exit`: nothing the tree loaded runs after it). It says what of the tree it ignored. In that session
only solution files are collected (nothing else of the tree is imported) and a plugin that is not
installed stops it (`gate/integrity.py`).

`--solbench-trust-tree` on the command line keeps the gate in the user's session, with the tree's
configuration and conftests (a trusted tree; solbench's own tests use it to replace the runner).
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
from pathlib import Path

import pytest

from solbench.gate.isolated import inside, resolved, run_isolated

CHILD_VARIABLE = "SOLBENCH_CLEAN_SESSION"  # set by the parent for the clean session; an ini file cannot set it
TRUST_FLAG = "--solbench-trust-tree"
GATE_FLAG = "--solbench"
MAX_NAMED = 12
SKIPPED_FOLDERS = {"site-packages", "node_modules", "__pycache__"}  # as pytest's norecursedirs: not the tree's tests


def in_clean_session() -> bool:
    return os.environ.get(CHILD_VARIABLE) == "1" and bool(sys.flags.isolated)


def _command_line(early_config: pytest.Config) -> list[str]:
    """What the user asked for: the invocation's arguments and PYTEST_ADDOPTS, never the tree's addopts."""
    return shlex.split(os.environ.get("PYTEST_ADDOPTS", "")) + [str(a) for a in early_config.invocation_params.args]


def wants_clean_session(early_config: pytest.Config) -> bool:
    args = _command_line(early_config)
    return GATE_FLAG in args and TRUST_FLAG not in args and not in_clean_session()


def tree_dirs(early_config: pytest.Config) -> list[Path]:
    """The folders the tree under test spans: the rootdir pytest chose, the invocation folder, the paths given."""
    dirs = [resolved(early_config.rootpath), resolved(early_config.invocation_params.dir)]
    for arg in early_config.known_args_namespace.file_or_dir or []:
        path = resolved(early_config.invocation_params.dir / str(arg).split("::")[0])
        dirs.append(path if path.is_dir() else path.parent)
    return sorted(set(dirs))


def _conftests(early_config: pytest.Config, tree: list[Path]) -> list[Path]:
    """conftest.py files pytest would have imported: beside and above the paths given, and below them."""
    found: set[Path] = set()
    for arg in early_config.known_args_namespace.file_or_dir or [early_config.invocation_params.dir]:
        path = resolved(early_config.invocation_params.dir / str(arg).split("::")[0])
        for folder in [path, *path.parents]:
            if (folder / "conftest.py").is_file():
                found.add(folder / "conftest.py")
            if folder == resolved(early_config.rootpath) or folder.parent == folder:
                break
        if path.is_dir():
            for folder, subfolders, files in os.walk(path):
                subfolders[:] = [d for d in subfolders if not d.startswith(".") and d not in SKIPPED_FOLDERS]
                if "conftest.py" in files:
                    found.add(Path(folder) / "conftest.py")
    return sorted(p for p in found if inside(p, tree))


def ignored_from_tree(early_config: pytest.Config, tree: list[Path]) -> list[str]:
    """What pytest loaded or would load from the tree: its configuration file, the plugins already
    imported from outside the installation (its `addopts = -p ...`), its conftest files."""
    from solbench.gate.integrity import foreign_plugins

    ignored = []
    if early_config.inipath is not None and inside(resolved(early_config.inipath), tree):
        ignored.append(f"pytest configuration {early_config.inipath}")
    ignored += [f"plugin {name}" for name in foreign_plugins(early_config.pluginmanager, tree)]
    ignored += [f"conftest {path}" for path in _conftests(early_config, tree)]
    if len(ignored) > MAX_NAMED:
        ignored = ignored[:MAX_NAMED] + [f"{len(ignored) - MAX_NAMED} more"]
    return ignored


def clean_arguments(early_config: pytest.Config, ini: Path) -> list[str]:
    invocation = [str(a) for a in early_config.invocation_params.args]
    return ["-p", "solbench.pytest_plugin", "-c", str(ini), "--rootdir", str(early_config.invocation_params.dir),
            "--noconftest", "-p", "no:cacheprovider", *invocation]


def run_clean_session(early_config: pytest.Config) -> None:
    """Gate in the clean session, then end this process with its exit status (never returns)."""
    capture = early_config.pluginmanager.getplugin("capturemanager")
    if capture is not None:  # the conftests would have been loaded under capture; the child writes to the terminal
        capture.suspend_global_capture(in_=True)
    tree = tree_dirs(early_config)
    ignored = ignored_from_tree(early_config, tree)
    if ignored:
        print("solbench: --solbench grades in a clean pytest session; ignored from the tree under test: "
              + "; ".join(ignored), flush=True)
    with tempfile.TemporaryDirectory(prefix="solbench-pytest-") as scratch:
        ini = Path(scratch) / "pytest.ini"
        ini.write_text("[pytest]\n")
        os.environ[CHILD_VARIABLE] = "1"
        try:
            code = run_isolated("pytest", clean_arguments(early_config, ini), tree, early_config.invocation_params.dir)
        except KeyboardInterrupt:
            code = pytest.ExitCode.INTERRUPTED
        finally:
            os.environ.pop(CHILD_VARIABLE, None)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code) if code >= 0 else 128 - code)  # a child killed by a signal: the shell's convention
