"""Candidate kernels: a build spec plus source files, from JSON or from a bare `.py` / `.cu` file."""

from __future__ import annotations

import ast
import hashlib
import json
import re
import sys
from dataclasses import field
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, StrictStr, ValidationInfo, model_validator
from pydantic.dataclasses import dataclass

from solbench import languages
from solbench.spec.definition import Definition, check_keys
from solbench.spec.errors import SpecError
from solbench.spec.model import FORMAT, FormatModel, absent

# A header line in a bare source file that names its problem, e.g. `# solbench: problem=rmsnorm_h4096`,
# and may declare its language: `# solbench: problem=rmsnorm_h4096 language=triton`.
_HEADER = re.compile(r"solbench:\s*problem\s*=\s*([A-Za-z0-9_.\-]+)")
_HEADER_LANGUAGE = re.compile(r"solbench:.*?\blanguage\s*=\s*([A-Za-z0-9_]+)")
HEADER_LINES = 30
STDLIB_AND_HARNESS = frozenset(sys.stdlib_module_names) | {
    "torch", "triton", "numpy", "solbench", "pynvml", "safetensors", "pandas", "rich", "pytest", "cupti",
}


def shadowing_sources(paths: list[str]) -> list[str]:
    """Source files whose top-level module name is a standard-library or harness package (a worker
    refuses to load them: REWARD_HACK)."""
    bad = []
    for path in paths:
        parts = PurePosixPath(path).parts
        top = parts[0] if len(parts) > 1 else PurePosixPath(parts[0]).stem
        if top in STDLIB_AND_HARNESS:
            bad.append(path)
    return bad


def check_source_path(path: str) -> str:
    """Source paths are relative, inside the solution folder, and plain."""
    if not isinstance(path, str) or not path.strip():
        raise SpecError("source path must be a non-empty string")
    if "\\" in path or "\x00" in path:
        raise SpecError(f"source path {path!r} contains a backslash or NUL")
    pure = PurePosixPath(path)
    if pure.is_absolute() or re.match(r"^[A-Za-z]:", path):
        raise SpecError(f"source path {path!r} is absolute")
    if ".." in pure.parts:
        raise SpecError(f"source path {path!r} leaves the solution folder ('..')")
    if any(part.startswith(".") for part in pure.parts):
        raise SpecError(f"source path {path!r} has a hidden component")
    return str(pure)


@dataclass(config=FORMAT)
class SourceFile(FormatModel):
    path: str
    content: str

    @model_validator(mode="before")
    @classmethod
    def _from_file(cls, data: Any, info: ValidationInfo) -> Any:
        """A source without `content` is read from `path` under the solution's folder (`base_dir`)."""
        if not isinstance(data, dict):
            return data
        check_keys(data, {"path", "content"}, "solution source")
        path = check_source_path(data.get("path"))  # checked before anything is read
        content = data.get("content")
        if not content:
            base_dir = (info.context or {}).get("base_dir")
            if base_dir is None:
                raise ValueError(f"source {path!r} has no content and no folder to read it from")
            file = Path(base_dir) / path
            if not file.is_file():
                raise ValueError(f"source {path!r} has no content and {file} does not exist")
            content = file.read_text()
        if not isinstance(content, str):
            raise ValueError(f"source {path!r} content must be text")
        return {"path": path, "content": content}


Flags = tuple[StrictStr, ...]


@dataclass(config=FORMAT)
class CompileOptions(FormatModel):
    cflags: Flags = ()
    cuda_cflags: Flags = ("-O3", "--use_fast_math")
    ld_flags: Flags = ()

    @model_validator(mode="before")
    @classmethod
    def _from_file(cls, data: Any) -> Any:
        if isinstance(data, dict):
            check_keys(data, {"cflags", "cuda_cflags", "ld_flags"}, "compile_options")
            for key, flags in data.items():
                if not isinstance(flags, list | tuple) or not all(isinstance(f, str) for f in flags):
                    raise ValueError(f"compile_options.{key} must be a list of strings")
        return data


@dataclass(config=FORMAT)
class BuildSpec(FormatModel):
    languages: tuple[str, ...]
    entry_point: str  # "file::function"
    target_hardware: tuple[str, ...] = ("LOCAL",)
    dependencies: tuple[str, ...] = ()
    destination_passing_style: StrictBool = True
    compile_options: CompileOptions | None = Field(default=None, exclude_if=absent)
    # the official format's field (only "torch"), kept so a file round-trips
    binding: Literal["torch"] | None = Field(default=None, exclude_if=absent)

    @model_validator(mode="before")
    @classmethod
    def _from_file(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        check_keys(data, {"languages", "language", "entry_point", "target_hardware", "dependencies",
                          "destination_passing_style", "binding", "compile_options"}, "solution spec")
        data = dict(data)
        names = data.pop("language", None) if "languages" not in data else data["languages"]
        data.pop("language", None)
        if isinstance(names, str):
            names = [names]
        if not isinstance(names, list | tuple) or not names or not all(isinstance(x, str) and x.strip() for x in names):
            raise ValueError("solution spec.languages must be a non-empty list of non-empty language names")
        data["languages"] = tuple(x.strip().lower() for x in names)
        entry = data.get("entry_point")
        if not isinstance(entry, str) or entry.count("::") != 1 or not all(entry.split("::")):
            raise ValueError(f"solution entry_point must look like 'file.py::function', got {entry!r}")
        data["target_hardware"] = tuple(str(h) for h in data.get("target_hardware") or ["LOCAL"])
        data["dependencies"] = tuple(str(d) for d in data.get("dependencies") or [])
        return data

    @property
    def entry_file(self) -> str:
        return self.entry_point.split("::")[0]

    @property
    def entry_function(self) -> str:
        return self.entry_point.split("::")[1]


@dataclass(config=FORMAT)
class Solution(FormatModel):
    name: str
    definition: str
    author: str
    spec: BuildSpec
    sources: tuple[SourceFile, ...]
    description: str | None = Field(default=None, exclude_if=absent)
    extra: Annotated[dict[str, Any], Field(exclude=True)] = field(default_factory=dict, compare=False)

    @classmethod
    def label(cls, data: Any) -> str | None:
        return "solution"

    @model_validator(mode="before")
    @classmethod
    def _from_file(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        extra = check_keys(data, {"name", "definition", "author", "spec", "sources", "description"}, "solution")
        for key in ("name", "definition", "spec", "sources"):
            if key not in data:
                raise ValueError(f"solution has no {key!r}")
        if not isinstance(data["sources"], list) or not data["sources"]:
            raise ValueError("solution needs at least one source")
        return {"name": str(data["name"]), "definition": str(data["definition"]),
                "author": str(data.get("author") or "unknown"), "spec": data["spec"], "sources": data["sources"],
                "description": data.get("description"), "extra": extra}

    @model_validator(mode="after")
    def _consistent(self) -> Solution:
        paths = [s.path for s in self.sources]
        if len(set(paths)) != len(paths):
            raise ValueError(f"solution has duplicate source paths: {paths}")
        if self.spec.entry_file not in paths:
            raise ValueError(f"entry point file {self.spec.entry_file!r} is not among the sources {paths}")
        return self

    def content_hash(self) -> str:
        """Identity of what runs: build spec and sources, not name or author."""
        payload = json.dumps({"spec": self.spec.to_dict(), "sources": sorted((s.path, s.content) for s in self.sources)},
                             sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def source(self, path: str) -> SourceFile:
        return next(s for s in self.sources if s.path == path)


# -- loading --------------------------------------------------------------------------------

def load_solution(path: str | Path, definition: Definition | None = None) -> Solution:
    """Load a solution JSON, or wrap a bare `.py` / `.cu` file as a single-source solution."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"solution file {path} does not exist")
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise SpecError(f"{path}: not valid JSON: line {exc.lineno}: {exc.msg}") from None
        try:
            return Solution.from_dict(data, base_dir=path.parent)
        except SpecError as exc:
            raise exc.located(str(path)) from None
    if path.suffix in languages.bare_file_suffixes():
        return solution_from_source(path.name, path.read_text(), definition)
    raise SpecError(f"{path}: a solution is a .json, .py or .cu file")


def problem_named_in(content: str) -> str | None:
    """The problem a bare source file names in a `solbench: problem=NAME` header comment."""
    for line in content.splitlines()[:HEADER_LINES]:
        match = _HEADER.search(line)
        if match:
            return match.group(1)
    return None


def language_declared_in(content: str) -> str | None:
    """The language a bare source file declares in its header (`solbench: ... language=NAME`), lower-cased."""
    for line in content.splitlines()[:HEADER_LINES]:
        match = _HEADER_LANGUAGE.search(line)
        if match:
            return match.group(1).lower()
    return None


def python_language(declared: str | None, tree: ast.AST | None, filename: str) -> str:
    """A bare `.py` file's language: what its header declares, else the language whose marker module it
    imports (`solbench.languages`: triton for `import triton`), else `pytorch`. A declared language that
    has a marker module must import it: the label decides how (and on a CPU, whether) the file runs, so it
    has to describe the code. A file that does not parse (`tree` None) keeps its declaration or `pytorch`;
    the loader reports it as a COMPILE_ERROR."""
    imports = languages.imported_modules(tree) if tree is not None else set()
    if declared:
        language = _known_language(declared, filename)
        if language.compiled:
            raise SpecError(f"{filename}: declares language={declared}, a compiled language; a .py file is "
                            f"Python ({', '.join(sorted(python_languages()))})")
        if language.marker_imports and tree is not None and not languages.is_marked_by(language, imports):
            raise SpecError(f"{filename}: declares language={declared} but never imports "
                            f"{' or '.join(language.marker_imports)}")
        return declared
    return languages.for_bare_file(languages.PYTHON_SUFFIXES[0], imports, default="pytorch")


def _known_language(name: str, filename: str) -> languages.Language:
    try:
        return languages.get(name)
    except languages.LoadError as exc:
        raise SpecError(f"{filename}: {exc}") from None


def python_languages() -> list[str]:
    return [lang.name for lang in languages.known() if not lang.compiled]


def compiled_languages() -> list[str]:
    return [lang.name for lang in languages.known() if lang.compiled]


def solution_from_source(filename: str, content: str, definition: Definition | None,
                         function: str = "run") -> Solution:
    """A bare file as a solution; the calling convention is inferred from `run`'s signature."""
    filename = check_source_path(filename)
    suffix = PurePosixPath(filename).suffix
    problem = problem_named_in(content) or (definition.name if definition else None)
    if problem is None:
        raise SpecError(f"{filename}: name the problem with a '# solbench: problem=NAME' header or pass one")
    declared = language_declared_in(content)
    if suffix in languages.PYTHON_SUFFIXES:
        try:
            tree = ast.parse(content)
        except SyntaxError:
            tree = None  # the loader reports it as a COMPILE_ERROR for every workload
        params = _python_params(tree, function, filename)
        language = python_language(declared, tree, filename)
    else:
        if declared is not None and (declared not in compiled_languages()):
            raise SpecError(f"{filename}: declares language={declared}; a {suffix} file is "
                            f"{' or '.join(compiled_languages())}")
        params = _cpp_params(content, function)
        language = declared or languages.for_bare_file(suffix, (), default="cuda_cpp")
    dps = infer_destination_passing(params, definition) if definition else True
    stem = PurePosixPath(filename).stem
    return Solution(name=stem, definition=problem, author="unknown",
                    spec=BuildSpec((language,), f"{filename}::{function}", destination_passing_style=dps),
                    sources=(SourceFile(filename, content),))


def _python_params(tree: ast.Module | None, function: str, filename: str) -> list[str] | None:
    if tree is None:
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            if node.args.vararg is not None:
                return None  # *args: cannot tell
            return [a.arg for a in node.args.posonlyargs + node.args.args]
    raise SpecError(f"{filename}: has no top-level function {function!r}")


def _cpp_params(content: str, function: str) -> list[str] | None:
    """Parameter names of a C++ function `function(...)` with a body (best effort)."""
    match = re.search(rf"\b{re.escape(function)}\s*\(([^)]*)\)\s*\{{", content)
    if not match:
        return None
    params = [p.strip() for p in match.group(1).split(",") if p.strip()]
    return [re.split(r"[\s*&]+", p)[-1] for p in params]


def infer_destination_passing(params: list[str] | None, definition: Definition) -> bool:
    """DPS when `run` takes inputs then outputs; value-returning when it takes the inputs only."""
    n_in, n_out = len(definition.inputs), len(definition.outputs)
    if params is None:
        return True
    if len(params) == n_in + n_out:
        return True
    if len(params) == n_in:
        return False
    raise SpecError(f"run takes {len(params)} parameters; the problem has {n_in} inputs and {n_out} outputs, "
                    f"so it should take {n_in} (returning outputs) or {n_in + n_out} (writing into outputs)")


def reference_solution(definition: Definition) -> Solution:
    """The problem's own reference as a value-returning PyTorch solution."""
    return Solution(name=f"reference_{definition.name}", definition=definition.name, author="reference",
                    spec=BuildSpec(("pytorch",), "reference.py::run", destination_passing_style=False),
                    sources=(SourceFile("reference.py", definition.reference),))


def is_reference(solution: Solution, definition: Definition) -> bool:
    """The problem's own reference code (trusted), whatever the solution is called."""
    sources = solution.sources
    return (len(sources) == 1 and sources[0].content == definition.reference
            and solution.spec.languages == ("pytorch",) and not solution.spec.destination_passing_style)
