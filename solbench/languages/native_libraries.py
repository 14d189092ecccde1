"""Where the C++ languages' vendor code is on this machine, found without a network: CUTLASS's headers
(`CUTLASS_DIR`, else the ones nvidia-cutlass ships under `cutlass_library/source`) and the cuDNN and cuBLAS
shared libraries the environment already has (the nvidia-* packages PyTorch loads, PyTorch's own folder,
the CUDA toolkit). A build links the very file PyTorch loads, by file name and with an rpath, since the
pip packages ship no unversioned `libcudnn.so` for `-lcudnn` to find."""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from solbench.languages import Requirement


@dataclass(frozen=True)
class BuildFlags:
    """What a C++ language adds to a build: include folders and linker options."""

    include_dirs: tuple[str, ...] = ()
    ld_flags: tuple[str, ...] = ()


def _package_dir(module: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


def cutlass_root() -> tuple[Path | None, str]:
    """(CUTLASS source root, where it came from); the root is None where no CUTLASS headers are found."""
    configured = os.environ.get("CUTLASS_DIR")
    if configured:
        root, origin = Path(configured), f"CUTLASS_DIR={configured}"
    else:
        package = _package_dir("cutlass_library")
        root, origin = (package / "source" if package else None), "nvidia-cutlass's cutlass_library"
    if root is None or not (root / "include" / "cutlass" / "cutlass.h").is_file():
        return None, origin
    return root, origin


def cutlass_flags() -> BuildFlags:
    root, _ = cutlass_root()
    if root is None:
        return BuildFlags()
    return BuildFlags(include_dirs=(str(root / "include"), str(root / "tools" / "util" / "include")))


def _cutlass_missing() -> str | None:
    root, origin = cutlass_root()
    return None if root is not None else f"no include/cutlass/cutlass.h in {origin}"


CUTLASS = Requirement("CUTLASS's headers", _cutlass_missing,
                      "pip install 'solbench[cutlass]' (or set CUTLASS_DIR to a CUTLASS checkout)")


def library_dirs() -> list[Path]:
    """Folders that may hold the CUDA libraries, in the order PyTorch's own loading prefers them."""
    folders: list[Path] = []
    for entry in sys.path:
        nvidia = Path(entry or ".") / "nvidia"
        if nvidia.is_dir():
            folders += sorted(p for p in nvidia.glob("*/lib") if p.is_dir())
    torch_dir = _package_dir("torch")
    if torch_dir is not None:
        folders.append(torch_dir / "lib")
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    folders += [Path(cuda_home) / "lib64", Path(cuda_home) / "lib"]
    return folders


def find_library(stem: str) -> Path | None:
    """The shared library `lib<stem>.so*` (the shortest name: the unversioned or soname file), or None."""
    for folder in library_dirs():
        found = sorted(folder.glob(f"lib{stem}.so*"), key=lambda p: (len(p.name), p.name))
        if found:
            return found[0]
    return None


def library_flags(stem: str) -> BuildFlags:
    library = find_library(stem)
    if library is None:
        return BuildFlags()
    folder = library.parent
    includes = (str(folder.parent / "include"),) if (folder.parent / "include").is_dir() else ()
    return BuildFlags(include_dirs=includes,
                      ld_flags=(f"-L{folder}", f"-l:{library.name}", f"-Wl,-rpath,{folder}"))


def _torch_cuda_major() -> int:
    import torch  # only to name the matching package, where a library is missing

    return int((torch.version.cuda or "13").split(".")[0])


def _library_requirement(stem: str, what: str, package: str) -> Requirement:
    def missing() -> str | None:
        return None if find_library(stem) else f"no lib{stem}.so in the nvidia-* packages, PyTorch or CUDA_HOME"

    def install() -> str:
        major = _torch_cuda_major()
        name = package if major >= 13 and package == "nvidia-cublas" else f"{package}-cu{major}"
        return f"pip install {name}"
    return Requirement(what, missing, install)


CUDNN = _library_requirement("cudnn", "the cuDNN library", "nvidia-cudnn")
CUBLAS = _library_requirement("cublas", "the cuBLAS library", "nvidia-cublas")
