"""Solutions in every official language through the real runner on this machine (`solbench run`, workers).

On a CPU machine: PyTorch and Triton solutions pass; the other languages end SKIPPED with the reason
(a CUDA GPU, or the exact `pip install` line where their package is missing); a declaration its sources
contradict is a COMPILE_ERROR in one line; and each official-format file is left as it was.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from solbench.api import evaluate
from solbench.spec import load_solution
from tests.child_env import repo_env
from tests.runner.conftest import write_problem

REPO = Path(__file__).resolve().parents[2]
AXPY_PY = "def run(x, y, out):\n    out.copy_(x * 2.0 + y)\n"
PYTHON_BODIES = {
    "pytorch": "import torch\n\n\n" + AXPY_PY,
    "triton": ("import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef _axpy(x, y, out, n, BLOCK: tl.constexpr):\n"
               "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    mask = offs < n\n"
               "    tl.store(out + offs, tl.load(x + offs, mask=mask) * 2.0 + tl.load(y + offs, mask=mask), mask=mask)\n"
               "\n\ndef run(x, y, out):\n    n = x.shape[0]\n    _axpy[(triton.cdiv(n, 128),)](x, y, out, n, BLOCK=128)\n"),
    "cute_dsl": "import cutlass.cute as cute  # noqa: F401\n\n\n" + AXPY_PY,
    "cudnn_frontend": "import cudnn  # noqa: F401\n\n\n" + AXPY_PY,
    "cutile": "import cuda.tile as ct  # noqa: F401\n\n\n" + AXPY_PY,
}
CPP_HEADERS = {"cuda_cpp": "", "cutlass": "#include <cutlass/cutlass.h>\n", "cudnn": "#include <cudnn.h>\n",
               "cublas": "#include <cublas_v2.h>\n"}
CPP_BODY = ("#include <torch/extension.h>\n\nvoid run(torch::Tensor x, torch::Tensor y, torch::Tensor out) {\n"
            "  out.copy_(x * 2.0 + y);\n}\n\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"run\", &run); }\n")


def official_file(folder: Path, language: str) -> Path:
    """An axpy solution in NVIDIA's JSON format (every field it defines), declaring `language`."""
    compiled = language in CPP_HEADERS
    entry = "kernel.cu" if compiled else "kernel.py"
    content = CPP_HEADERS[language] + CPP_BODY if compiled else PYTHON_BODIES[language]
    spec = {"languages": [language], "target_hardware": ["LOCAL"], "entry_point": f"{entry}::run",
            "dependencies": [], "destination_passing_style": True, "binding": "torch"}
    if compiled:
        spec["compile_options"] = {"cflags": [], "cuda_cflags": ["-O3", "--use_fast_math"], "ld_flags": ["-lcuda"]}
    data = {"name": f"{language}_axpy", "definition": "axpy_fp32", "author": "solbench-tests",
            "description": f"axpy in {language}", "spec": spec, "sources": [{"path": entry, "content": content}]}
    path = folder / f"{language}.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


@pytest.mark.parametrize("language", [*PYTHON_BODIES, *CPP_HEADERS])
def test_official_file_round_trips_through_solbench_run(language, tmp_path):
    problem = write_problem(tmp_path / "problems", sizes=(64,))
    path = official_file(tmp_path, language)
    before = path.read_bytes()
    assert load_solution(path).to_dict() | {"description": json.loads(before)["description"]} == json.loads(before)
    env = repo_env(REPO, TRITON_INTERPRET="1")
    result = subprocess.run([sys.executable, "-m", "solbench", "run", str(problem), "--solution", str(path),
                             "--json", "--device", "cpu", "--trials", "1", "--iters", "2", "--warmup", "1",
                             "--no-adaptive"], env=env, capture_output=True, text=True, timeout=600)
    assert path.read_bytes() == before
    traces = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(traces) == 1, result.stderr[-2000:]
    evaluation = traces[0]["evaluation"]
    if language in ("pytorch", "triton"):
        assert evaluation["status"] == "PASSED", evaluation["log"]
    else:  # no GPU here: the language's own reason, in one line, before any worker loads it
        assert evaluation["status"] == "SKIPPED"
        assert "\n" not in evaluation["log"].strip()
        assert "need a CUDA GPU" in evaluation["log"] or "pip install" in evaluation["log"]


@pytest.mark.parametrize("language", ["cute_dsl", "cudnn_frontend", "cutile", "triton", "cutlass", "cudnn", "cublas"])
def test_contradicted_declaration_is_a_one_line_compile_error(language, tmp_path, fast_config):
    """Whatever this machine lacks, a declaration the sources contradict is refused by the loader."""
    problem = write_problem(tmp_path / "problems", sizes=(64,))
    path = official_file(tmp_path, "pytorch" if language not in CPP_HEADERS else "cuda_cpp")
    data = json.loads(path.read_text())
    data["spec"]["languages"] = [language]
    path.write_text(json.dumps(data))
    trace = evaluate(problem, path, config=fast_config)[0]
    assert trace.evaluation.status.value == "COMPILE_ERROR", trace.evaluation.log
    first = trace.evaluation.log.strip().splitlines()[0]
    assert first.startswith(f"declares language {language} but no source ")


@pytest.mark.parametrize(("language", "module", "extra"), [("cute_dsl", "cutlass", "cute"),
                                                           ("cudnn_frontend", "cudnn", "cudnn"),
                                                           ("cutile", "cuda.tile", "cutile")])
def test_missing_extra_ends_skipped_with_the_install_line(language, module, extra, tmp_path, fast_config,
                                                          monkeypatch):
    """The orchestrator decides before a worker starts; the worker is never asked to import the package."""
    problem = write_problem(tmp_path / "problems", sizes=(64,))
    monkeypatch.setitem(sys.modules, module, None)  # what the import system reads as "not installed"
    trace = evaluate(problem, official_file(tmp_path, language), config=fast_config)[0]
    assert trace.evaluation.status.value == "SKIPPED"
    assert trace.evaluation.log.strip().endswith(f": pip install 'solbench[{extra}]'"), trace.evaluation.log
