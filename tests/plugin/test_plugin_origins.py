"""Plugins are located by their import spec, never by `__file__`; one that cannot be located is foreign. The
isolated interpreter's path holds nothing of the tree (solbench/gate/integrity.py, gate/isolated.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from solbench.gate.integrity import foreign_plugins, spec_origin
from solbench.gate.isolated import clean_path, isolated_command, solbench_home


def load(path: Path, name: str, text: str):
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def tree_modules(tmp_path):
    names = []

    def make(name: str, text: str):
        names.append(name)
        return load(tmp_path / f"{name}.py", name, text)

    yield make
    for name in names:
        sys.modules.pop(name, None)


def test_a_plugin_is_located_by_its_spec_whatever_its_file_says(tmp_path, tree_modules):
    vanisher = tree_modules("solbench_test_vanisher", "del __file__\n")
    impostor = tree_modules("solbench_test_impostor", "import json\n__file__ = json.__file__\n")
    liar = tree_modules("solbench_test_liar", "import json\n__spec__ = json.__spec__\n__file__ = json.__file__\n")
    assert spec_origin(vanisher) == tmp_path.resolve() / "solbench_test_vanisher.py"
    assert spec_origin(impostor) == tmp_path.resolve() / "solbench_test_impostor.py"
    assert spec_origin(liar) is None  # its spec names json, which is another module: cannot be located
    assert spec_origin(json) is not None

    manager = pytest.PytestPluginManager()
    for module in (vanisher, impostor, liar, json):
        manager.register(module, module.__name__)
    foreign = "\n".join(foreign_plugins(manager))
    assert f"solbench_test_vanisher ({tmp_path.resolve()}" in foreign
    assert f"solbench_test_impostor ({tmp_path.resolve()}" in foreign
    assert "solbench_test_liar (cannot be located)" in foreign
    assert "json (" not in foreign


def test_a_module_of_the_tree_on_the_path_is_foreign_when_the_tree_is_known(tmp_path, tree_modules, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    plugin = tree_modules("solbench_test_on_path", "def pytest_sessionfinish(session, exitstatus):\n    pass\n")
    manager = pytest.PytestPluginManager()
    manager.register(plugin, "solbench_test_on_path")
    assert foreign_plugins(manager) == []  # on this interpreter's path: installed, as far as it can tell
    assert foreign_plugins(manager, [tmp_path.resolve()]) == [
        f"solbench_test_on_path ({tmp_path.resolve() / 'solbench_test_on_path.py'}) (implements pytest_sessionfinish)"]


def test_the_isolated_path_drops_the_tree(tmp_path, monkeypatch):
    tree, other = tmp_path / "pr", tmp_path / "wheels"
    (tree / "sub").mkdir(parents=True)
    other.mkdir()
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tree / "sub"), str(other), str(tree)]))
    assert clean_path([tree.resolve()]) == [str(solbench_home()), str(other)]
    command, env = isolated_command("pytest", ["-q"], [tree.resolve()])
    assert command[:2] == [sys.executable, "-I"] and command[-2:] == ["pytest", "-q"]
    assert env["PYTHONPATH"] == os.pathsep.join([str(solbench_home()), str(other)])
