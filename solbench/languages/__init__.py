"""Kernel languages: one module per language, found by this registry; adding a language is adding a module.

A language says what it is (its names, the file suffixes and the imports that mark a bare source file as
written in it, what it needs to run) and how a worker turns a `Solution` written into a source folder
into a Python callable: Python-hosted languages import the entry module (`python_entry`), compiled ones
build an extension first (`cuda_cpp`). The spec (detecting a bare file's language), the orchestrator
(which failures a worker may claim) and the worker (loading) all ask this registry, never a name list.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
import re
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
class Requirement:
    """Something a language needs installed: `missing()` says why it is absent (None when present), and
    `install` is the exact command that provides it."""

    what: str
    missing: Callable[[], str | None]
    install: str | Callable[[], str]  # a callable where the line depends on the environment (a CUDA version)

    def refusal(self, language: str) -> str | None:
        why = self.missing()
        if not why:
            return None
        install = self.install() if callable(self.install) else self.install
        return f"{language} solutions need {self.what} ({why}): {install}"


def python_module(module: str, package: str, extra: str) -> Requirement:
    """A Python package found by import name without importing it (the orchestrator checks this too)."""
    def missing() -> str | None:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent that is no package, or a module set to None
            found = False
        return None if found else f"no module {module!r}"
    return Requirement(package, missing, f"pip install 'solbench[{extra}]'")


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
    requires: tuple[Requirement, ...] = ()  # installed packages or libraries; absent: SKIPPED with the install line
    marker_includes: tuple[str, ...] = ()  # a compiled solution in this language #includes one of these
    # (major, minor) compute capability -> why this language cannot run there, or None
    unsupported_on: Callable[[tuple[int, int]], str | None] | None = None

    def refusal(self, dtype_names: Iterable[str], is_cuda: bool,
                capability: tuple[int, int] | None = None) -> str | None:
        """Why a solution in this language cannot be judged on this device (then SKIPPED), or None.
        `capability`: the GPU's compute capability where known."""
        for requirement in self.requires:
            reason = requirement.refusal(self.name)
            if reason:
                return reason
        if is_cuda:
            return self.unsupported_on(capability) if self.unsupported_on and capability else None
        if self.needs_cuda:
            return f"{self.name} solutions need a CUDA GPU; this machine has none"
        wrong = sorted(set(dtype_names) & set(self.cpu_wrong_dtypes))
        if wrong:
            return f"{self.cpu_wrong_reason} ({', '.join(wrong)}); this solution can only be judged on a GPU"
        return None


# File suffixes: this is their one home (the spec, the job builder and the gate read them from here).
PYTHON_SUFFIXES = (".py",)  # a Python-hosted language's entry file and modules
COMPILED_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c")  # translation units a compiled language builds
HEADER_SUFFIXES = (".h", ".hpp", ".cuh")  # C++ sources that are included, never built alone

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
    """The language that builds a solution, taken from its declaration; mixed Python/compiled sets, and a
    declaration its sources contradict, are refused (COMPILE_ERROR, one line)."""
    languages = [get(name) for name in solution.spec.languages]
    loaders = {lang.load for lang in languages}
    if len(loaders) > 1:
        raise LoadError(f"languages {list(solution.spec.languages)} need different loaders; use one kind")
    for language in languages:
        contradiction = contradicted_by_sources(language, solution)
        if contradiction:
            raise LoadError(contradiction)
    return languages[0]


_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


def contradicted_by_sources(language: Language, solution: Solution) -> str | None:
    """Why the sources are not in the declared language (no marker import or #include of it), or None.
    A source that does not parse is left to the loader, which reports the syntax error."""
    entry = solution.spec.entry_file
    if language.compiled and not any(Path(s.path).suffix in COMPILED_SUFFIXES for s in solution.sources):
        return (f"declares language {language.name}, a compiled language, but has no "
                f"{'/'.join(COMPILED_SUFFIXES)} source")
    if not language.compiled and Path(entry).suffix not in PYTHON_SUFFIXES:
        return f"declares language {language.name}, a Python language, but its entry file {entry} is not a .py file"
    if language.marker_imports:
        imported: set[str] = set()
        for source in solution.sources:
            if Path(source.path).suffix in PYTHON_SUFFIXES:
                try:
                    imported |= imported_modules(ast.parse(source.content))
                except SyntaxError:
                    return None
        if not is_marked_by(language, imported):
            return (f"declares language {language.name} but no source imports "
                    f"{' or '.join(language.marker_imports)}")
    if language.marker_includes:
        included = [name for source in solution.sources for name in _INCLUDE.findall(source.content)]
        if not any(marker in name for marker in language.marker_includes for name in included):
            return (f"declares language {language.name} but no source includes "
                    f"{' or '.join(language.marker_includes)}")
    return None


def imported_modules(tree: ast.AST) -> set[str]:
    """Every module name an import statement of `tree` names (absolute imports only)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def solution_refusal(solution: Solution, dtype_names: Iterable[str], is_cuda: bool,
                     capability: tuple[int, int] | None = None) -> str | None:
    """Why `solution` cannot be judged here (then SKIPPED), or None; also None for a declaration its sources
    contradict, which its worker's loader refuses as a COMPILE_ERROR on any machine."""
    try:
        for_solution(solution)
    except LoadError:
        return None
    return refusal(solution.spec.languages, dtype_names, is_cuda, capability)


def refusal(language_names: Iterable[str], dtype_names: Iterable[str], is_cuda: bool,
            capability: tuple[int, int] | None = None) -> str | None:
    """Why a solution in these languages cannot be judged here (the first reason), or None."""
    dtype_names = list(dtype_names)
    for name in language_names:
        reason = get(name).refusal(dtype_names, is_cuda, capability)
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


def solution_file_suffixes() -> tuple[str, ...]:
    """The files taken for solutions where a folder is searched: solution JSON, bare Python files, and bare
    files with a compiled language's own suffixes (`Language.suffixes`: `.cu` for CUDA C++)."""
    return (".json",) + PYTHON_SUFFIXES + tuple(s for language in known() for s in language.suffixes)


def bare_file_suffixes() -> tuple[str, ...]:
    """The suffixes a bare source file may have to be wrapped as a solution (any Python or C++ source)."""
    return PYTHON_SUFFIXES + COMPILED_SUFFIXES + HEADER_SUFFIXES
