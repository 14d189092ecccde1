"""Compiled languages (CUDA C++, CUTLASS, cuDNN, cuBLAS): built as a torch extension, with the vendor
headers and libraries of the declared languages (`native_libraries`) added to the solution's own compile
and link options.

The build runs in its own subprocess (killed with its whole process group on timeout) and is
cached by the solution's content hash in the loading process's cache folder (`cache_root`): within one
worker, loading a solution again does not recompile it; a solution's next worker builds it afresh. The module
must expose the entry function through `PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from solbench.languages import COMPILED_SUFFIXES, Language, LoadError, register
from solbench.languages.native_libraries import (
    CUBLAS,
    CUDNN,
    CUTLASS,
    BuildFlags,
    cutlass_flags,
    library_flags,
)

if TYPE_CHECKING:
    from solbench.spec.solution import Solution



def cache_root() -> Path:
    """Where builds go: `SOLBENCH_CACHE`, else the XDG cache folder. A worker gets neither from its orchestrator
    but its own cache folder as XDG's (`orchestrator.process.sandbox_env`): the one place its sandbox lets it
    write, private to a solution's process and gone with it (a build folder shared by solutions would let one
    plant a library that another loads), kept across runs for the trusted reference worker."""
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(os.environ.get("SOLBENCH_CACHE") or os.path.join(xdg, "solbench")) / "extensions"


# What each vendor language adds to the build (found on this machine: languages.native_libraries).
VENDOR_FLAGS: dict[str, Callable[[], BuildFlags]] = {
    "cutlass": cutlass_flags, "cudnn": lambda: library_flags("cudnn"), "cublas": lambda: library_flags("cublas"),
}


def vendor_flags(solution: Solution) -> BuildFlags:
    """The include folders and linker options of every vendor language the solution declares."""
    flags = [VENDOR_FLAGS[name]() for name in solution.spec.languages if name in VENDOR_FLAGS]
    return BuildFlags(tuple(d for f in flags for d in f.include_dirs), tuple(o for f in flags for o in f.ld_flags))


def link_options(own: tuple[str, ...] | list[str], flags: BuildFlags) -> list[str]:
    """The solution's linker options, then the vendor ones. An official solution names `-lcudnn` or `-lcublas`,
    which finds no file where only the pip packages' versioned libraries exist: where a vendor option names
    that library by file name (`-l:libcudnn.so.9`), it takes the bare `-l`'s place."""
    named = {option.split(":", 1)[1].split(".so")[0].removeprefix("lib") for option in flags.ld_flags
             if option.startswith("-l:")}
    return [option for option in own if option.removeprefix("-l") not in named or not option.startswith("-l")
            ] + list(flags.ld_flags)


def build_key(solution: Solution, flags: BuildFlags | None = None) -> str:
    import torch  # heavy: the registry is also read where torch is not loaded (bare-file detection)

    flags = flags or BuildFlags()
    payload = json.dumps([solution.content_hash(), torch.__version__, torch.version.cuda,
                          os.environ.get("TORCH_CUDA_ARCH_LIST", ""), list(flags.include_dirs), list(flags.ld_flags)])
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def load_extension_entry(solution: Solution, source_dir: Path, device: str, timeout_s: float) -> Callable:
    if not device.startswith("cuda"):
        raise LoadError("CUDA C++ solutions need a CUDA GPU; this machine has none", status="SKIPPED")
    sources = [s.path for s in solution.sources if PurePosixPath(s.path).suffix in COMPILED_SUFFIXES]
    if not sources:
        raise LoadError("no .cu/.cpp sources to compile")
    flags = vendor_flags(solution)
    key = build_key(solution, flags)
    build_dir = cache_root() / key
    build_dir.mkdir(parents=True, exist_ok=True)
    name = f"solbench_ext_{key}"
    library = build_dir / f"{name}.so"
    if not library.exists():
        options = solution.spec.compile_options
        request = {
            "name": name, "build_dir": str(build_dir), "include_dirs": [str(source_dir), *flags.include_dirs],
            "sources": [str(source_dir / s) for s in sources],
            "cflags": list(options.cflags) if options else [],
            "cuda_cflags": list(options.cuda_cflags) if options else ["-O3"],
            "ld_flags": link_options(options.ld_flags if options else (), flags),
        }
        _build_in_subprocess(request, timeout_s)
        if not library.exists():
            raise LoadError(f"the build finished but produced no {library.name}")
    spec = importlib.util.spec_from_file_location(name, library)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:
        raise LoadError(f"loading the built extension failed: {exc}") from None
    function = getattr(module, solution.spec.entry_function, None)
    if not callable(function):
        raise LoadError(f"the extension exposes no {solution.spec.entry_function!r} "
                        f"(bind it with PYBIND11_MODULE(TORCH_EXTENSION_NAME, m))")
    return function


def _build_in_subprocess(request: dict, timeout_s: float) -> None:
    proc = subprocess.Popen([sys.executable, "-P", "-m", "solbench.languages.cuda_cpp",
                             json.dumps(request)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise LoadError(f"compilation did not finish within {timeout_s:.0f} s", status="TIMEOUT") from None
    if proc.returncode != 0:
        text = output.decode("utf-8", "replace")
        raise LoadError("compilation failed:\n" + text[-6000:])


def _build(request: dict) -> None:
    from torch.utils.cpp_extension import load  # heavy, and only in the build subprocess

    load(name=request["name"], sources=request["sources"], build_directory=request["build_dir"],
         extra_include_paths=request["include_dirs"], extra_cflags=request["cflags"] or None,
         extra_cuda_cflags=request["cuda_cflags"] or None, extra_ldflags=request["ld_flags"] or None,
         verbose=False, is_python_module=True)


register(Language("cuda_cpp", load_extension_entry, needs_cuda=True, compiled=True, suffixes=(".cu",)))
register(Language("cuda", load_extension_entry, needs_cuda=True, compiled=True))
register(Language("cutlass", load_extension_entry, needs_cuda=True, compiled=True, requires=(CUTLASS,),
                  marker_includes=("cutlass/", "cute/")))
register(Language("cudnn", load_extension_entry, needs_cuda=True, compiled=True, requires=(CUDNN,),
                  marker_includes=("cudnn",)))
register(Language("cublas", load_extension_entry, needs_cuda=True, compiled=True, requires=(CUBLAS,),
                  marker_includes=("cublas",)))


if __name__ == "__main__":
    _build(json.loads(sys.argv[1]))
