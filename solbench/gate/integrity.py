"""`pytest --solbench` refuses to gate a tree that brings its own pytest code.

In a CI gate for kernel PRs the PR controls every file in its tree: a `conftest.py` next to its solutions
(hooks that flip failed reports to passed, deselect items, or reset the exit status in
`pytest_sessionfinish`), or a `pytest.ini` whose `addopts = -p plugin` loads a module of the tree. Any
such module could rewrite the outcome, so once collection has loaded every conftest, a plugin whose file
lies in the tree under test (the rootdir, the invocation folder, the paths given) and not in the
installation (site-packages, the standard library, solbench itself) stops the session with a usage
error (exit 4) that names it. pytest ends a session on a usage error whatever the hooks set after it.

This is a check inside the process that runs the tree's code, so it can be reached around (a module
imported from the tree may patch this one); `solbench gate` (solbench/cli/gate.py), which starts no
pytest at all, is the gate for untrusted trees (docs/ci.md).
"""

from __future__ import annotations

import inspect
import site
import sysconfig
from pathlib import Path

import pytest

import solbench

# The hooks through which a plugin changes what a gate reports (named in the refusal, to say why it matters).
REPORT_HOOKS = ("pytest_runtest_makereport", "pytest_report_teststatus", "pytest_runtest_logreport",
                "pytest_runtest_protocol", "pytest_runtest_call", "pytest_collection_modifyitems",
                "pytest_ignore_collect", "pytest_sessionfinish", "pytest_terminal_summary", "pytest_unconfigure")


def _installed_dirs() -> list[Path]:
    dirs = [Path(solbench.__file__).resolve().parent, Path(pytest.__file__).resolve().parent.parent]
    dirs += [Path(p).resolve() for key in ("stdlib", "platstdlib", "purelib", "platlib")
             if (p := sysconfig.get_paths().get(key))]
    dirs += [Path(p).resolve() for p in site.getsitepackages()]
    if user := site.getusersitepackages():
        dirs.append(Path(user).resolve())
    return dirs


def _tree_dirs(config: pytest.Config) -> list[Path]:
    dirs = [config.rootpath.resolve(), config.invocation_params.dir.resolve()]
    for arg in config.args:
        path = (config.invocation_params.dir / str(arg).split("::")[0]).resolve()
        dirs.append(path if path.is_dir() else path.parent)
    return dirs


def _file_of(plugin) -> Path | None:
    try:
        name = plugin.__file__ if inspect.ismodule(plugin) else inspect.getfile(type(plugin))
    except (TypeError, AttributeError):
        return None
    return Path(name).resolve() if name else None


def _inside(path: Path, dirs: list[Path]) -> bool:
    return any(path == d or d in path.parents for d in dirs)


def tree_plugins(config: pytest.Config) -> list[str]:
    """Each plugin (conftest or module) from the tree under test, with the report hooks it implements."""
    tree, installed = _tree_dirs(config), _installed_dirs()
    found = []
    for plugin in config.pluginmanager.get_plugins():
        path = _file_of(plugin)
        if path is None or not _inside(path, tree) or _inside(path, installed):
            continue
        hooks = sorted(name for name in REPORT_HOOKS if hasattr(plugin, name))
        found.append(f"{path}" + (f" (implements {', '.join(hooks)})" if hooks else ""))
    return sorted(found)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """After collection every conftest of the tree is loaded: refuse to go on if any is there."""
    found = tree_plugins(session.config)
    if found:
        raise pytest.UsageError(
            "--solbench: refusing to gate: pytest code from the tree under test could rewrite the outcome: "
            + "; ".join(found) + ". Remove it, or gate untrusted trees with `solbench gate` (docs/ci.md)")
