"""Every language the official solution format allows: declared, staged, loaded, refused in one line.

CPU tests here; the GPU side (every example PASSED, cuTile SKIPPED on Hopper) is in test_languages_gpu.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from solbench import languages
from solbench.languages import LoadError, native_libraries
from solbench.languages.cuda_cpp import build_key, vendor_flags
from solbench.spec.solution import Solution

OFFICIAL = ("pytorch", "triton", "cuda_cpp", "cute_dsl", "cutile", "cudnn_frontend", "cutlass", "cudnn", "cublas")
# language -> (the marker a source must import or include, the module or library its requirement looks for)
PYTHON_HOSTED = {"triton": "triton", "cute_dsl": "cutlass", "cudnn_frontend": "cudnn", "cutile": "cuda.tile"}
EXTRAS = {"cute_dsl": ("cutlass", "pip install 'solbench[cute]'"),
          "cudnn_frontend": ("cudnn", "pip install 'solbench[cudnn]'"),
          "cutile": ("cuda.tile", "pip install 'solbench[cutile]'")}
COMPILED = {"cuda_cpp": "", "cutlass": "#include <cutlass/cutlass.h>\n", "cudnn": "#include <cudnn.h>\n",
            "cublas": "#include <cublas_v2.h>\n"}


def python_solution(language: str, body: str, entry: str = "kernel.py::run") -> Solution:
    return Solution.from_dict({
        "name": f"{language}_axpy", "definition": "axpy_fp32", "author": "test",
        "spec": {"languages": [language], "entry_point": entry, "target_hardware": ["LOCAL"]},
        "sources": [{"path": "kernel.py", "content": body}]})


def marked_body(language: str) -> str:
    """An axpy whose marker import sits in an unused function: the module loads on any machine."""
    marker = PYTHON_HOSTED.get(language)
    lazy = f"def _kernel_library():\n    import {marker}\n    return {marker}\n\n\n" if marker else ""
    return lazy + "def run(x, y):\n    return x * 2.0 + y\n"


def compiled_solution(language: str, include: str | None = None, suffix: str = ".cu") -> Solution:
    source = (COMPILED[language] if include is None else include) + "#include <torch/extension.h>\n"
    return Solution.from_dict({
        "name": f"{language}_axpy", "definition": "axpy_fp32", "author": "test",
        "spec": {"languages": [language], "entry_point": f"kernel{suffix}::run", "target_hardware": ["LOCAL"]},
        "sources": [{"path": f"kernel{suffix}", "content": source}]})


def stage(solution: Solution, folder: Path) -> Path:
    for source in solution.sources:
        (folder / source.path).write_text(source.content)
    return folder


def test_every_official_language_has_an_entry():
    names = {language.name for language in languages.known()}
    assert set(OFFICIAL) <= names
    assert set(PYTHON_HOSTED) | {"pytorch"} == {n for n in OFFICIAL if not languages.get(n).compiled}


# -- loading and staging ---------------------------------------------------------------------

@pytest.mark.parametrize("language", ["pytorch", *PYTHON_HOSTED])
def test_python_hosted_language_loads_its_entry(language, tmp_path):
    import torch

    solution = python_solution(language, marked_body(language))
    chosen = languages.for_solution(solution)
    assert chosen.name == language and not chosen.compiled
    run = chosen.load(solution, stage(solution, tmp_path), "cpu", 60)
    assert torch.equal(run(torch.ones(3), torch.ones(3)), torch.full((3,), 3.0))


@pytest.mark.parametrize("language", sorted(COMPILED))
def test_compiled_language_is_built_not_imported_and_needs_a_gpu(language, tmp_path):
    solution = compiled_solution(language)
    chosen = languages.for_solution(solution)
    assert chosen.compiled and chosen.needs_cuda
    with pytest.raises(LoadError) as caught:
        chosen.load(solution, stage(solution, tmp_path), "cpu", 60)
    assert caught.value.status == "SKIPPED" and "\n" not in str(caught.value)


def test_cutlass_headers_come_from_nvidia_cutlass_or_cutlass_dir(tmp_path, monkeypatch):
    root = tmp_path / "cutlass"
    (root / "include" / "cutlass").mkdir(parents=True)
    (root / "include" / "cutlass" / "cutlass.h").write_text("#pragma once\n")
    monkeypatch.setenv("CUTLASS_DIR", str(root))
    flags = vendor_flags(compiled_solution("cutlass"))
    assert flags.include_dirs == (str(root / "include"), str(root / "tools" / "util" / "include"))
    assert languages.get("cutlass").refusal([], True) is None
    other = build_key(compiled_solution("cutlass"), flags)
    monkeypatch.delenv("CUTLASS_DIR")
    if native_libraries.cutlass_root()[0] is None:
        pytest.skip("nvidia-cutlass is not installed here: pip install 'solbench[cutlass]'")
    found = vendor_flags(compiled_solution("cutlass")).include_dirs
    assert found[0].endswith("cutlass_library/source/include") and Path(found[0], "cute", "tensor.hpp").is_file()
    assert build_key(compiled_solution("cutlass"), vendor_flags(compiled_solution("cutlass"))) != other


@pytest.mark.parametrize("stem", ["cudnn", "cublas"])
def test_vendor_library_is_linked_by_file_name_with_an_rpath(stem, tmp_path, monkeypatch):
    """The nvidia-* packages ship `libcudnn.so.9` and no `libcudnn.so`: the build names the file itself."""
    lib = tmp_path / "nvidia" / stem / "lib"
    lib.mkdir(parents=True)
    (tmp_path / "nvidia" / stem / "include").mkdir()
    (lib / f"lib{stem}.so.9").write_bytes(b"")
    (lib / f"lib{stem}.so.9.1.0").write_bytes(b"")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    flags = vendor_flags(compiled_solution(stem))
    assert flags.ld_flags == (f"-L{lib}", f"-l:lib{stem}.so.9", f"-Wl,-rpath,{lib}")
    assert flags.include_dirs == (str(tmp_path / "nvidia" / stem / "include"),)
    assert languages.get(stem).refusal([], True) is None


# -- bad declarations and missing entry points -----------------------------------------------

@pytest.mark.parametrize("language", sorted(PYTHON_HOSTED))
def test_python_declaration_without_its_import_is_refused(language):
    with pytest.raises(LoadError) as caught:
        languages.for_solution(python_solution(language, "import torch\n\ndef run(x, y):\n    return x\n"))
    assert caught.value.status == "COMPILE_ERROR"
    assert str(caught.value) == (f"declares language {language} but no source imports "
                                 f"{PYTHON_HOSTED[language]}")


@pytest.mark.parametrize("language", ["pytorch", *PYTHON_HOSTED])
def test_python_declaration_with_a_compiled_entry_is_refused(language):
    solution = compiled_solution("cuda_cpp")
    data = solution.to_dict()
    data["spec"]["languages"] = [language]
    with pytest.raises(LoadError) as caught:
        languages.for_solution(Solution.from_dict(data))
    assert caught.value.status == "COMPILE_ERROR" and "\n" not in str(caught.value)
    assert f"declares language {language}" in str(caught.value)


@pytest.mark.parametrize("language", sorted(COMPILED))
def test_compiled_declaration_over_python_sources_is_refused(language):
    with pytest.raises(LoadError) as caught:
        languages.for_solution(python_solution(language, marked_body("pytorch")))
    assert caught.value.status == "COMPILE_ERROR"
    assert str(caught.value).startswith(f"declares language {language}, a compiled language, but has no .cu/")


@pytest.mark.parametrize("language", ["cutlass", "cudnn", "cublas"])
def test_vendor_declaration_without_its_header_is_refused(language):
    with pytest.raises(LoadError) as caught:
        languages.for_solution(compiled_solution(language, include="#include <cuda_runtime.h>\n"))
    assert caught.value.status == "COMPILE_ERROR" and "\n" not in str(caught.value)
    assert str(caught.value).startswith(f"declares language {language} but no source includes ")


@pytest.mark.parametrize("language", ["pytorch", *PYTHON_HOSTED])
def test_missing_python_entry_point_is_a_compile_error(language, tmp_path):
    solution = python_solution(language, marked_body(language), entry="kernel.py::forward")
    with pytest.raises(LoadError) as caught:
        languages.for_solution(solution).load(solution, stage(solution, tmp_path), "cpu", 60)
    assert caught.value.status == "COMPILE_ERROR"
    assert str(caught.value) == "kernel.py has no callable 'forward'"


# -- a missing extra -------------------------------------------------------------------------

@pytest.mark.parametrize("language", sorted(EXTRAS))
def test_missing_extra_names_the_install_line(language, monkeypatch):
    module, line = EXTRAS[language]
    monkeypatch.setitem(sys.modules, module, None)  # what the import system reads as "not installed"
    for is_cuda in (False, True):
        reason = languages.get(language).refusal([], is_cuda, (10, 0))
        assert reason is not None and reason.endswith(": " + line) and "\n" not in reason


def test_missing_cutlass_headers_name_the_install_line(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTLASS_DIR", str(tmp_path))
    reason = languages.get("cutlass").refusal([], True, (9, 0))
    assert reason == (f"cutlass solutions need CUTLASS's headers (no include/cutlass/cutlass.h in "
                      f"CUTLASS_DIR={tmp_path}): pip install 'solbench[cutlass]' (or set CUTLASS_DIR to a "
                      f"CUTLASS checkout)")


@pytest.mark.parametrize(("stem", "package"), [("cudnn", "nvidia-cudnn-cu"), ("cublas", "nvidia-cublas")])
def test_missing_vendor_library_names_the_install_line(stem, package, tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.setattr(native_libraries, "library_dirs", lambda: [tmp_path])  # only an empty folder to search
    reason = languages.get(stem).refusal([], True, (9, 0))
    assert reason is not None and f"lib{stem}.so" in reason and f": pip install {package}" in reason


# -- SKIPPED reasons -------------------------------------------------------------------------

def test_cutile_is_skipped_on_hopper_only():
    cutile = languages.get("cutile")
    if cutile.refusal([], True, (10, 0)) and "pip install" in cutile.refusal([], True, (10, 0)):
        pytest.skip("cuda-tile is not installed here: pip install 'solbench[cutile]'")
    reason = cutile.refusal(["float32"], True, (9, 0))
    assert reason and "Hopper" in reason and "sm_90" in reason and "tileiras 13.2" in reason
    assert cutile.refusal([], True, (10, 0)) is None and cutile.refusal([], True, (8, 9)) is None
    assert cutile.refusal([], True, None) is None  # capability unknown: the loader decides


@pytest.mark.parametrize("language", [n for n in OFFICIAL if n not in ("pytorch", "triton")])
def test_gpu_languages_are_skipped_on_cpu_with_a_reason(language, monkeypatch):
    monkeypatch.setenv("CUTLASS_DIR", "")
    reason = languages.get(language).refusal(["float32"], False)
    assert reason and "\n" not in reason
    assert "CUDA GPU" in reason or "pip install" in reason


def test_an_official_bare_library_option_gives_way_to_the_found_file(tmp_path, monkeypatch):
    from solbench.languages.cuda_cpp import link_options

    lib = tmp_path / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcublas.so.13").write_bytes(b"")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    flags = vendor_flags(compiled_solution("cublas"))
    assert link_options(["-lcuda", "-lcublas", "-lcublasLt"], flags) == [
        "-lcuda", "-lcublasLt", f"-L{lib}", "-l:libcublas.so.13", f"-Wl,-rpath,{lib}"]


def test_hostile_suite_has_a_case_in_every_new_language_that_runs_on_hopper():
    from tests.anticheat.suite import discover, load_case

    declared = {load_case(case, None).spec.languages[0] for case in discover("hostile")}
    assert {"cute_dsl", "cudnn_frontend", "cuda_cpp", "cutlass", "cudnn", "cublas"} <= declared


def test_cute_dsl_cache_is_in_the_solution_workers_scratch_folder(tmp_path):
    """As Triton's: a JIT cache shared between solutions would let one plant kernels that another loads."""
    from solbench.orchestrator.process import sandbox_env

    env: dict[str, str] = {}
    sandbox_env(env, str(tmp_path), "candidate")
    cache = Path(env["CUTE_DSL_CACHE_DIR"])
    assert cache.is_dir() and cache.is_relative_to(tmp_path)
    assert str(tmp_path) in json.loads(env["SOLBENCH_SANDBOX"])["writable"]
