"""Kernel languages: one module per language, found by this registry; adding a language is adding a module.

A language says what it is (its names, the file suffixes and the imports that mark a bare source file as
written in it, what it needs to run) and how a worker turns a `Solution` written into a source folder
into a Python callable: Python-hosted languages import the entry module (`python_entry`), compiled ones
build an extension first (`cuda_cpp`). The spec (detecting a bare file's language), the orchestrator
(which failures a worker may claim) and the worker (loading) all ask this registry, never a name list.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the loaders only read attributes of a Solution; no import cycle with spec
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
    compiled: bool = False  # sources are compiled (C++/CUDA), not imported as Python
    suffixes: tuple[str, ...] = ()  # a bare source file with one of these suffixes is in this language
    marker_imports: tuple[str, ...] = ()  # a bare .py file that imports one of these is in this language
    cpu_wrong_dtypes: tuple[str, ...] = ()  # dtypes the CPU fallback of this language computes wrongly
    cpu_wrong_reason: str = ""

    def refusal(self, dtype_names: Iterable[str], is_cuda: bool) -> str | None:
        """Why a solution in this language cannot be judged on this device (then SKIPPED), or None."""
        if is_cuda:
            return None
        if self.needs_cuda:
            return f"{self.name} solutions need a CUDA GPU; this machine has none"
        wrong = sorted(set(dtype_names) & set(self.cpu_wrong_dtypes))
        if wrong:
            return f"{self.cpu_wrong_reason} ({', '.join(wrong)}); this solution can only be judged on a GPU"
        return None


_REGISTRY: dict[str, Language] = {}
_DISCOVERED = False


def register(language: Language) -> Language:
    _REGISTRY[language.name] = language
    return language


def _discover() -> None:
    """Import every module of this package once: each language module registers itself."""
    global _DISCOVERED
    if _DISCOVERED:
        return
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        importlib.import_module(f"{__name__}.{info.name}")
    _DISCOVERED = True


def get(name: str) -> Language:
    _discover()
    if name not in _REGISTRY:
        raise LoadError(f"unknown language {name!r}; known: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def known() -> list[Language]:
    _discover()
    return [_REGISTRY[name] for name in sorted(_REGISTRY)]


def for_solution(solution: Solution) -> Language:
    """The language that builds a solution; mixed Python/compiled sets are refused."""
    languages = [get(name) for name in solution.spec.languages]
    loaders = {lang.load for lang in languages}
    if len(loaders) > 1:
        raise LoadError(f"languages {list(solution.spec.languages)} need different loaders; use one kind")
    return languages[0]


def refusal(language_names: Iterable[str], dtype_names: Iterable[str], is_cuda: bool) -> str | None:
    """Why a solution in these languages cannot be judged here (the first reason), or None."""
    dtype_names = list(dtype_names)
    for name in language_names:
        reason = get(name).refusal(dtype_names, is_cuda)
        if reason:
            return reason
    return None


def is_marked_by(language: Language, imported: Iterable[str]) -> bool:
    """Whether a file importing `imported` imports one of the language's marker modules."""
    return any(module == marker or module.startswith(marker + ".") for marker in language.marker_imports
               for module in imported)


def for_bare_file(suffix: str, imported: Iterable[str], default: str) -> str:
    """The language of a bare source file: by its suffix, else by a marker import, else `default`."""
    imported = set(imported)
    for language in known():
        if suffix in language.suffixes:
            return language.name
    for language in known():
        if is_marked_by(language, imported):
            return language.name
    return default
