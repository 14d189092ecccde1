"""The example solutions in solutions/ agree with their problem's reference.

On CPU: every PyTorch example (bf16 is fine: PyTorch's CPU bf16 is exact enough) and the
float32 Triton examples under the Triton interpreter, on the first workload's shapes. The
Triton interpreter computes bf16 wrongly, so the bf16 problems' Triton kernels are checked
here only in float16, on small shapes, against the same maths. Tests marked `gpu` run
every example, CUDA C++ included, on the first workloads of its problem.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
from pathlib import Path

import pytest
import torch

from solbench.spec import Definition, Problem, Solution, load_problem, load_solution
from solbench.spec.dtypes import torch_dtype

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
PROBLEMS = ROOT / "problem_defs" / "core"

# file -> (problem, language, destination-passing): both conventions are shown across the examples
EXPECTED = {
    "rmsnorm_h4096/torch_rmsnorm.py": ("rmsnorm_h4096", "pytorch", False),
    "rmsnorm_h4096/triton_rmsnorm.py": ("rmsnorm_h4096", "triton", True),
    "rmsnorm_h4096/cuda_rmsnorm.cu": ("rmsnorm_h4096", "cuda_cpp", True),
    "swiglu_mlp_gateup_h2048_i6144/torch_swiglu.py": ("swiglu_mlp_gateup_h2048_i6144", "pytorch", True),
    "swiglu_mlp_gateup_h2048_i6144/triton_swiglu.py": ("swiglu_mlp_gateup_h2048_i6144", "triton", False),
    "gemm_n4096_k4096/torch_gemm.py": ("gemm_n4096_k4096", "pytorch", False),
    "gemm_n4096_k4096/triton_gemm.py": ("gemm_n4096_k4096", "triton", True),
    "layernorm_fp32_h1024/torch_layernorm.py": ("layernorm_fp32_h1024", "pytorch", True),
    "layernorm_fp32_h1024/triton_layernorm.py": ("layernorm_fp32_h1024", "triton", False),
    "layernorm_fp32_h1024/cuda_layernorm.cu": ("layernorm_fp32_h1024", "cuda_cpp", False),
    "layernorm_fp32_h1024/multirow_triton/solution.json": ("layernorm_fp32_h1024", "triton", True),
    "rmsnorm_h4096/cute_dsl_rmsnorm/solution.json": ("rmsnorm_h4096", "cute_dsl", True),
    "gemm_n4096_k4096/cute_dsl_gemm/solution.json": ("gemm_n4096_k4096", "cute_dsl", True),
    "gemm_n4096_k4096/cudnn_frontend_gemm/solution.json": ("gemm_n4096_k4096", "cudnn_frontend", True),
    "gemm_n4096_k4096/cublas_gemm/solution.json": ("gemm_n4096_k4096", "cublas", True),
    "gemm_n4096_k4096/cutlass_gemm/solution.json": ("gemm_n4096_k4096", "cutlass", False),
    "swiglu_mlp_gateup_h2048_i6144/cudnn_swiglu/solution.json": ("swiglu_mlp_gateup_h2048_i6144", "cudnn", False),
}
_counter = itertools.count()


# -- helpers --------------------------------------------------------------------------------

def problem_of(name: str) -> Problem:
    return load_problem(PROBLEMS / name)


def solution_files() -> list[Path]:
    bare = [p for p in SOLUTIONS.glob("*/*") if p.suffix in (".py", ".cu")]
    return sorted(bare + list(SOLUTIONS.glob("*/*/solution.json")))


def load_example(relative: str) -> tuple[Solution, Problem]:
    problem = problem_of(EXPECTED[relative][0])
    return load_solution(SOLUTIONS / relative, problem.definition), problem


def import_module(solution: Solution, folder: Path):
    """Write the sources out and import the entry file, as a runner would (Triton needs real files)."""
    for source in solution.sources:
        target = folder / source.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source.content)
    name = f"solbench_example_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(name, folder / solution.spec.entry_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def import_solution(solution: Solution, folder: Path):
    return getattr(import_module(solution, folder), solution.spec.entry_function)


def reference_run(definition: Definition):
    namespace: dict = {"__name__": f"reference_{definition.name}"}
    exec(compile(definition.reference, f"<reference {definition.name}>", "exec"), namespace)
    return namespace["run"]


def make_inputs(definition: Definition, axes: dict[str, int], device: str = "cpu", seed: int = 0) -> list:
    """Seeded normal inputs; weight matrices scaled by 1/sqrt(fan_in) as real weights are."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    inputs = []
    for (name, spec), shape in zip(definition.inputs.items(), definition.input_shapes(axes).values()):
        t = torch.randn(shape, generator=gen, dtype=torch.float32)
        if len(shape) == 2 and (name.endswith("weight") or name == "B"):
            t /= math.sqrt(shape[-1])
        inputs.append(t.to(device=device, dtype=torch_dtype(spec.dtype)))
    return inputs


def call(run, solution: Solution, definition: Definition, axes: dict[str, int], inputs: list) -> list:
    """Call in the solution's convention; DPS outputs start as NaN so unwritten elements show."""
    if not solution.spec.destination_passing_style:
        result = run(*inputs)
        return list(result) if isinstance(result, (tuple, list)) else [result]
    outputs = [torch.full(shape, float("nan"), dtype=torch_dtype(spec.dtype), device=inputs[0].device)
               for spec, shape in zip(definition.outputs.values(), definition.output_shapes(axes).values())]
    run(*inputs, *outputs)
    return outputs


def assert_matches(actual: torch.Tensor, expected: torch.Tensor, tolerance) -> None:
    """The workload's rule: finite, and a required fraction within atol + rtol * |expected|."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    a, e = actual.float(), expected.float()
    assert torch.isfinite(a).all(), "non-finite output (unwritten DPS element?)"
    if tolerance.required_matched_ratio >= 1.0:
        torch.testing.assert_close(a, e, atol=tolerance.max_atol, rtol=tolerance.max_rtol)
        return
    ok = (a - e).abs() <= tolerance.max_atol + tolerance.max_rtol * e.abs()
    ratio = ok.float().mean().item()
    assert ratio >= tolerance.required_matched_ratio, f"matched ratio {ratio:.4f}"


def check_example(relative: str, tmp_path: Path, workload_index: int = 0, device: str = "cpu") -> None:
    solution, problem = load_example(relative)
    workload = problem.workloads[workload_index]
    axes = problem.definition.resolve_axes(workload.axes)
    inputs = make_inputs(problem.definition, axes, device)
    expected = reference_run(problem.definition)(*[t.clone() for t in inputs])
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    actual = call(import_solution(solution, tmp_path), solution, problem.definition, axes, inputs)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert_matches(a, e, workload.tolerance)


# -- what is shipped ------------------------------------------------------------------------

def test_every_example_is_listed():
    found = {str(p.relative_to(SOLUTIONS)) for p in solution_files()}
    assert found == set(EXPECTED)


@pytest.mark.parametrize("relative", sorted(EXPECTED))
def test_example_loads_with_expected_convention(relative):
    solution, problem = load_example(relative)
    name, language, dps = EXPECTED[relative]
    assert solution.definition == problem.name == name
    assert solution.spec.languages == (language,)
    assert solution.spec.destination_passing_style is dps
    if relative.endswith((".py", ".cu")):  # bare files name their problem in a header
        header = "//" if relative.endswith(".cu") else "#"
        assert solution.sources[0].content.startswith(f"{header} solbench: problem={name}\n")
        assert load_solution(SOLUTIONS / relative).definition == name  # no definition needed


def test_both_conventions_are_shown():
    conventions = {(lang, dps) for _, lang, dps in EXPECTED.values()}
    assert {True, False} == {dps for _, dps in conventions}
    assert {True, False} == {dps for lang, dps in conventions if lang == "pytorch"}
    assert {True, False} == {dps for lang, dps in conventions if lang == "triton"}


@pytest.mark.parametrize("relative", [r for r in EXPECTED if r.endswith(".cu")])
def test_cuda_sources_bind_run(relative):
    source = (SOLUTIONS / relative).read_text()
    assert "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)" in source
    assert 'm.def("run", &run' in source
    assert "at::cuda::getCurrentCUDAStream()" in source
    assert "C10_CUDA_KERNEL_LAUNCH_CHECK()" in source


# -- CPU checks -----------------------------------------------------------------------------

@pytest.mark.parametrize("relative", [r for r, (_, lang, _) in EXPECTED.items() if lang == "pytorch"])
@pytest.mark.parametrize("workload_index", [0, 1])
def test_pytorch_example_matches_reference(relative, workload_index, tmp_path):
    check_example(relative, tmp_path, workload_index)


@pytest.mark.parametrize("relative", ["layernorm_fp32_h1024/triton_layernorm.py",
                                      "layernorm_fp32_h1024/multirow_triton/solution.json"])
@pytest.mark.parametrize("workload_index", [0, 1])
def test_fp32_triton_example_in_interpreter(relative, workload_index, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    check_example(relative, tmp_path, workload_index)


def test_multirow_tile_path_in_interpreter(tmp_path, monkeypatch):
    """The ROWS > 1 tile (taken for thousands of tokens on a GPU), with a ragged last tile."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    solution, problem = load_example("layernorm_fp32_h1024/multirow_triton/solution.json")
    module = import_module(solution, tmp_path)
    x, w, b = make_inputs(problem.definition, problem.definition.resolve_axes({"num_tokens": 6}))
    y = torch.full_like(x, float("nan"))
    module._layernorm_rows[(2,)](x, w, b, y, 6, x.stride(0), y.stride(0), 1024, module.EPS, ROWS=4, BLOCK=1024)
    expected = reference_run(problem.definition)(x, w, b)
    torch.testing.assert_close(y, expected, atol=1e-4, rtol=1e-4)


def _module(relative: str, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    solution, _ = load_example(relative)
    return import_module(solution, tmp_path)


def test_triton_rmsnorm_kernel_fp16_in_interpreter(tmp_path, monkeypatch):
    """bf16 is wrong in the interpreter; the same kernel in float16 checks its logic."""
    module = _module("rmsnorm_h4096/triton_rmsnorm.py", tmp_path, monkeypatch)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(3, 4096, generator=gen).half()
    w = torch.randn(4096, generator=gen).half()
    out = torch.full_like(x, float("nan"))
    module.run(x, w, out)
    xf = x.float()
    expected = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).half()
    torch.testing.assert_close(out, expected, atol=1e-2, rtol=1e-2)


def test_triton_silu_and_mul_fp16_in_interpreter(tmp_path, monkeypatch):
    module = _module("swiglu_mlp_gateup_h2048_i6144/triton_swiglu.py", tmp_path, monkeypatch)
    gen = torch.Generator().manual_seed(2)
    gate_up = torch.randn(3, 2 * 1500, generator=gen).half()  # 1500: a ragged last block
    act = module.silu_and_mul(gate_up)
    g, u = gate_up.float().chunk(2, dim=-1)
    torch.testing.assert_close(act, (torch.nn.functional.silu(g) * u).half(), atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize(("m", "n", "k"), [(1, 64, 512), (20, 96, 200), (130, 64, 128)])
def test_triton_gemm_fp16_in_interpreter(m, n, k, tmp_path, monkeypatch):
    """Each tile configuration, ragged M and N edges, and a K that is not a multiple of BLOCK_K."""
    module = _module("gemm_n4096_k4096/triton_gemm.py", tmp_path, monkeypatch)
    gen = torch.Generator().manual_seed(3)
    a = torch.randn(m, k, generator=gen).half()
    b = torch.randn(n, k, generator=gen).half()
    c = torch.full((m, n), float("nan"), dtype=torch.float16)
    module.run(a, b, c)
    torch.testing.assert_close(c, (a.float() @ b.float().t()).half(), atol=2e-2, rtol=1e-2)


# -- GPU checks (skipped without CUDA) ------------------------------------------------------

def load_with_language(solution: Solution, problem: Problem, folder: Path):
    """Stage the sources and load them as a worker would; skipped where this machine lacks a package."""
    from solbench import languages

    language = languages.for_solution(solution)
    reason = language.refusal(problem.definition.dtypes(), True, torch.cuda.get_device_capability())
    if reason:
        pytest.skip(reason)
    for source in solution.sources:
        (folder / source.path).write_text(source.content)
    return language.load(solution, folder, "cuda", 900)


_BUILT: dict[str, object] = {}


def _build_cuda(solution: Solution, build_root: Path):
    """Compile a CUDA C++ example once per session as a torch extension; returns its run."""
    from torch.utils.cpp_extension import load

    key = solution.content_hash()
    if key not in _BUILT:
        folder = build_root / key
        folder.mkdir(parents=True, exist_ok=True)
        src = folder / solution.spec.entry_file
        src.write_text(solution.sources[0].content)
        module = load(name=f"solbench_{src.stem}_{key}", sources=[str(src)],
                      extra_cuda_cflags=["-O3", "--use_fast_math"], build_directory=str(folder), verbose=False)
        _BUILT[key] = module.run
    return _BUILT[key]


@pytest.mark.gpu
@pytest.mark.parametrize("relative", sorted(EXPECTED))
@pytest.mark.parametrize("workload_index", [0, 1, 2, 5])
def test_example_on_gpu(relative, workload_index, tmp_path, tmp_path_factory):
    solution, problem = load_example(relative)
    workload = problem.workloads[workload_index]
    axes = problem.definition.resolve_axes(workload.axes)
    inputs = make_inputs(problem.definition, axes, "cuda")
    expected = reference_run(problem.definition)(*[t.clone() for t in inputs])
    if solution.spec.languages == ("cuda_cpp",):
        run = _build_cuda(solution, tmp_path_factory.getbasetemp() / "cuda_builds")
    elif solution.spec.languages[0] in ("pytorch", "triton"):
        run = import_solution(solution, tmp_path)
    else:  # the other languages through their registry entry: vendor headers and libraries, JIT caches
        run = load_with_language(solution, problem, tmp_path)
    actual = call(run, solution, problem.definition, axes, inputs)
    torch.cuda.synchronize()
    assert_matches(actual[0], expected, workload.tolerance)
