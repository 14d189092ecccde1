"""A Python process the tree under test cannot configure: where both gates decide their verdicts.

A kernel PR controls every file in its tree, and Python and pytest obey the folder they start in: a
module beside the working directory shadows an installed one, a `conftest.py` or a `pyproject.toml` with
`addopts = -p plugin` runs the tree's code inside pytest, a `.pth` file or `sitecustomize.py` on the path
runs at start-up. Rather than recognise each of these, the gates evaluate in a fresh interpreter started
in isolated mode (`-I`: no `PYTHON*` variables, no user site, neither the script's folder nor the working
directory on `sys.path`), whose `sys.path` is solbench's own folder plus the caller's `PYTHONPATH` minus
every entry inside the tree. What the tree holds is then data: the solution files are read, and run only
inside the sandboxed workers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

# Puts the paths given as the first argument in front of sys.path, then runs a module as `python -m` would.
BOOTSTRAP = ("import runpy, sys; paths = sys.argv.pop(1); "
             "sys.path[:0] = [p for p in paths.split(__import__('os').pathsep) if p]; "
             "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)")


def inside(path: Path, folders: list[Path]) -> bool:
    return any(path == folder or folder in path.parents for folder in folders)


def resolved(path: str | Path) -> Path:
    return Path(os.path.abspath(os.path.realpath(path)))


def solbench_home() -> Path:
    """The folder that holds the `solbench` package this process runs (site-packages, or a checkout)."""
    import solbench

    return resolved(solbench.__file__).parent.parent


def clean_path(tree: list[Path]) -> list[str]:
    """solbench's folder and the caller's PYTHONPATH, without anything inside the tree under test. The
    folder of solbench comes first even inside the tree: it is the solbench the caller chose to run."""
    entries = [str(solbench_home())]
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if entry and not inside(resolved(entry), tree) and entry not in entries:
            entries.append(entry)
    return entries


def isolated_command(module: str, args: list[str], tree: list[Path]) -> tuple[list[str], dict[str, str]]:
    """`python -m MODULE ARGS` in isolated mode, and its environment (PYTHONPATH cleaned the same way, for
    the worker processes it starts, which run with `-P`)."""
    paths = clean_path(tree)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return [sys.executable, "-I", "-c", BOOTSTRAP, os.pathsep.join(paths), module, *args], env


def run_isolated(module: str, args: list[str], tree: list[Path], cwd: Path) -> int:
    """Run it to the end, its output straight to ours; its exit status. Ctrl-C reaches it from the terminal
    (same process group) and it winds down by its own rules, keeping what finished: this one waits for it.
    A SIGTERM or SIGHUP is sent to this process alone (`kill`, a CI runner's cancel): it is passed on."""
    command, env = isolated_command(module, args, tree)
    sys.stdout.flush()
    sys.stderr.flush()
    child = subprocess.Popen(command, env=env, cwd=cwd)
    while True:
        try:
            return child.wait()
        except KeyboardInterrupt as exc:  # raised by solbench.cli's handler, named after its signal
            name = exc.args[0] if exc.args else ""
            if name in ("SIGTERM", "SIGHUP") and child.poll() is None:
                child.send_signal(getattr(signal, name))


def tree_modules(tree: list[Path]) -> list[str]:
    """Modules this process has imported from inside the tree (by where their import spec says they came
    from, and their file), solbench itself excepted (the one the caller chose to run): a tree that shadows
    a module of the gate's process is refused, not trusted. The tree's folders leave `sys.path` first, so
    that nothing imported later comes from them."""
    sys.path[:] = [entry for entry in sys.path if not inside(resolved(entry or "."), tree)]
    own = [solbench_home() / "solbench"]
    found = []
    for name, module in list(sys.modules.items()):
        if name == "solbench" or name.startswith("solbench."):
            continue
        spec = getattr(module, "__spec__", None)
        for where in (getattr(spec, "origin", None), getattr(module, "__file__", None)):
            if (isinstance(where, str) and os.path.isabs(where) and inside(resolved(where), tree)
                    and not inside(resolved(where), own)):
                found.append(f"{name} ({where})")
                break
    return sorted(found)
