"""What tests of the scripts in `benchmarks/` share: loading one as a module, by path (they are not a package)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@contextmanager
def benchmark_script(file_name: str) -> Iterator[ModuleType]:
    """`benchmarks/<file_name>` imported under a private name, registered in `sys.modules` while in use (its
    dataclasses look their module up there) and removed afterwards."""
    path = BENCHMARKS / file_name
    name = f"solbench_benchmark_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)
