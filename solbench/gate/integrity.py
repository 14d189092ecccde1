"""The clean session of `pytest --solbench` refuses to gate with a plugin that is not installed.

`gate/clean_session.py` runs the gate in a pytest that loads no configuration file, conftest or cache of
the tree under test, in an isolated interpreter whose `sys.path` holds nothing of the tree. This check is
the second wall: once collection is done, every registered plugin must be located, by its import spec
(the spec `sys.modules` holds under the spec's own name, whose origin and loader agree), in a folder of
that interpreter's `sys.path` (the standard library, site-packages, solbench, the caller's PYTHONPATH
minus the tree). A plugin that cannot be located (a deleted or rewritten `__file__` or `__spec__`, a
module that is not the one imported under its name) counts as the tree's. `__file__` is never believed.
A refusal is a usage error (exit 4) that names the plugin; pytest ends a session on a usage error
whatever the hooks set after it.
"""

from __future__ import annotations

import inspect
import os
import sys
import sysconfig
from pathlib import Path

import pytest

from solbench.gate.isolated import inside, resolved

# The hooks through which a plugin changes what a gate reports (named in the refusal, to say why it matters).
REPORT_HOOKS = ("pytest_runtest_makereport", "pytest_report_teststatus", "pytest_runtest_logreport",
                "pytest_runtest_protocol", "pytest_runtest_call", "pytest_collection_modifyitems",
                "pytest_ignore_collect", "pytest_sessionfinish", "pytest_terminal_summary", "pytest_unconfigure")


def installed_dirs() -> list[Path]:
    """The folders this interpreter imports from (in the clean session: chosen by the gate, not the tree)."""
    return [resolved(entry) for entry in sys.path if entry and os.path.isabs(entry)]


def spec_origin(plugin) -> Path | None:
    """Where the plugin's module was imported from, by its import spec; None when that cannot be told."""
    if inspect.ismodule(plugin):
        module = plugin
    else:  # a class registered as it is, or an instance: its class's module
        module = sys.modules.get(getattr(plugin if inspect.isclass(plugin) else type(plugin), "__module__", ""))
    spec = getattr(module, "__spec__", None)
    name, origin = getattr(spec, "name", None), getattr(spec, "origin", None)
    if module is None or not name or sys.modules.get(name) is not module:
        return None  # not the module imported under its own name
    if not isinstance(origin, str) or not os.path.isabs(origin) or not os.path.isfile(origin):
        return None  # built-in, frozen, namespace or made up: not a located file
    loader_path = getattr(spec.loader, "path", origin)
    if not isinstance(loader_path, str) or resolved(loader_path) != resolved(origin):
        return None
    return resolved(origin)


def foreign_plugins(pluginmanager: pytest.PytestPluginManager, tree: list[Path] | None = None) -> list[str]:
    """Each registered plugin that is not located in an installed folder (or, given the tree's folders,
    lies in the tree, outside solbench itself), with the report hooks it implements."""
    import solbench

    installed = installed_dirs()
    own = [resolved(solbench.__file__).parent] + [resolved(p) for key in ("stdlib", "platstdlib", "purelib", "platlib")
                                                  if (p := sysconfig.get_paths().get(key))]
    found = []
    for plugin in pluginmanager.get_plugins():
        if plugin is None:
            continue
        origin = spec_origin(plugin)
        if (origin is not None and inside(origin, installed)
                and (not tree or not inside(origin, tree) or inside(origin, own))):
            continue
        label = pluginmanager.get_name(plugin) or type(plugin).__name__
        where = str(origin) if origin is not None else "cannot be located"
        hooks = sorted(name for name in REPORT_HOOKS if hasattr(plugin, name))
        found.append(f"{label} ({where})" + (f" (implements {', '.join(hooks)})" if hooks else ""))
    return sorted(found)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """After collection every plugin that could rewrite the outcome is loaded: refuse to go on if one is foreign."""
    found = foreign_plugins(session.config.pluginmanager)
    if found:
        raise pytest.UsageError(
            "--solbench: refusing to gate: a pytest plugin that is not installed could rewrite the outcome: "
            + "; ".join(found) + ". Gate untrusted trees with `solbench gate` (docs/ci.md)")
