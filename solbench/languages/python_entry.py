"""The loader of Python-hosted languages: the entry file is imported as a module from the source folder."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from solbench.languages import PYTHON_SUFFIXES, LoadError

if TYPE_CHECKING:
    from solbench.spec.solution import Solution


def load_python_entry(solution: Solution, source_dir: Path, device: str, timeout_s: float) -> Callable:
    entry = PurePosixPath(solution.spec.entry_file)
    if entry.suffix not in PYTHON_SUFFIXES:
        raise LoadError(f"entry point {solution.spec.entry_point!r} of a Python language must be a .py file")
    # Sibling modules of the solution are importable, but only after the standard library and
    # installed packages: a source named `torch.py` or `json.py` cannot shadow them.
    if str(source_dir) not in sys.path:
        sys.path.append(str(source_dir))
    module_name = "solbench_solution_" + "_".join(entry.with_suffix("").parts)
    spec = importlib.util.spec_from_file_location(module_name, source_dir / entry)
    if spec is None or spec.loader is None:
        raise LoadError(f"cannot import {entry}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise LoadError(f"{entry}: syntax error at line {exc.lineno}: {exc.msg}") from None
    except BaseException as exc:  # noqa: BLE001 - import-time failure of untrusted code
        raise LoadError(f"importing {entry} failed: {type(exc).__name__}: {exc}", status="RUNTIME_ERROR") from exc
    function = getattr(module, solution.spec.entry_function, None)
    if not callable(function):
        raise LoadError(f"{entry} has no callable {solution.spec.entry_function!r}")
    return function
