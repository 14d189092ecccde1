"""Export a block along the code path eager runs take, not the one a model offers exporters.

Some transformers models branch on `is_torchdynamo_exporting()`: Qwen3-Next's gated delta rule (and
Qwen3.5's, OLMo-hybrid's) builds the triangular inverse by a 63-step forward substitution when exporting,
and calls `torch.linalg.solve_triangular` otherwise; Mamba and Jamba take a sequential scan when
exporting and `associative_scan` when merely compiling. A reference traced down the export branch
computes something else than the module a user runs (its bf16 and fp32 results differ), so validation
rightly refuses it. While a block is exported, the modules that define its classes and branch on
exporting see both checks answer as in eager mode. If that path cannot be exported, the export is
retried on the library's export path, and validation decides.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable

from torch import nn

CHECKS = ("is_torchdynamo_exporting", "is_torchdynamo_compiling")


def export(module: nn.Module, run: Callable[[], object]):
    """`run()` (an export of `module`) with the eager path where the module's code has an export branch."""
    namespaces = _branching_namespaces(module)
    if not namespaces:
        return run()
    try:
        with _eager(namespaces):
            return run()
    except Exception:  # noqa: BLE001 - the eager path does not export: the library's export path it is
        return run()


def _branching_namespaces(module: nn.Module) -> list[dict]:
    """The globals of each module file that defines a class of `module` and branches on exporting."""
    seen: dict[str, dict] = {}
    for sub in module.modules():
        name = type(sub).__module__
        namespace = vars(sys.modules[name]) if name in sys.modules else {}
        if callable(namespace.get(CHECKS[0])):
            seen[name] = namespace
    return list(seen.values())


@contextlib.contextmanager
def _eager(namespaces: list[dict]):
    saved = [(ns, name, ns[name]) for ns in namespaces for name in CHECKS if name in ns]
    try:
        for ns, name, _ in saved:
            ns[name] = _false
        yield
    finally:
        for ns, name, original in saved:
            ns[name] = original


def _false() -> bool:
    return False
