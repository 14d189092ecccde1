"""Kernel languages behind a registry: adding a language is adding a module here.

A language turns a `Solution` written into a source folder into a Python callable inside the
worker. Python-hosted languages (PyTorch, Triton, and later CuTe DSL, cuTile, cuDNN frontend) import
the entry module; compiled languages build an extension first (in a subprocess with a timeout).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from solbench.spec.solution import Solution


class LoadError(RuntimeError):
    """The solution could not be built or loaded; `status` says which trace status applies."""

    def __init__(self, message: str, status: str = "COMPILE_ERROR"):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Language:
    name: str
    load: Callable[[Solution, Path, str, float], Callable]  # (solution, source_dir, device, timeout_s)
    needs_cuda: bool = False


_REGISTRY: dict[str, Language] = {}


def register(language: Language) -> Language:
    _REGISTRY[language.name] = language
    return language


def get(name: str) -> Language:
    _load_builtin()
    if name not in _REGISTRY:
        raise LoadError(f"unknown language {name!r}; known: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def known() -> list[str]:
    _load_builtin()
    return sorted(_REGISTRY)


def for_solution(solution: Solution) -> Language:
    """The language that builds a solution; mixed Python/compiled sets are refused."""
    languages = [get(name) for name in solution.spec.languages]
    loaders = {lang.load for lang in languages}
    if len(loaders) > 1:
        raise LoadError(f"languages {list(solution.spec.languages)} need different loaders; use one kind")
    return languages[0]


def _load_builtin() -> None:
    from solbench.runner.languages import cuda_extension, python_module  # noqa: F401  (registers)
