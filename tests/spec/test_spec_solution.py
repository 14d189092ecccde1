"""Solutions: JSON with inline or on-disk sources, bare .py / .cu files, and the content hash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from solbench.spec import BuildSpec, Definition, SpecError, load_solution
from solbench.spec.solution import (
    Solution,
    check_source_path,
    problem_named_in,
    reference_solution,
    solution_from_source,
)
from tests.spec.spec_builders import make_definition

KERNEL = "import torch\n\ndef run(x, weight):\n    return x * weight\n"


def make_solution(**overrides) -> dict:
    data = {
        "name": "mul_v1",
        "definition": "scale_rows",
        "author": "someone",
        "spec": {"languages": ["pytorch"], "target_hardware": ["LOCAL"], "entry_point": "main.py::run",
                 "destination_passing_style": False},
        "sources": [{"path": "main.py", "content": KERNEL}],
    }
    data.update(overrides)
    return data


@pytest.fixture
def definition() -> Definition:
    return Definition.from_dict(make_definition())


def test_inline_solution():
    s = Solution.from_dict(make_solution(description="plain torch"))
    assert (s.name, s.definition, s.author, s.description) == ("mul_v1", "scale_rows", "someone", "plain torch")
    assert s.spec.languages == ("pytorch",)
    assert s.spec.entry_file == "main.py" and s.spec.entry_function == "run"
    assert s.spec.destination_passing_style is False
    assert s.source("main.py").content == KERNEL


def test_round_trip():
    s = Solution.from_dict(make_solution())
    again = Solution.from_dict(s.to_dict())
    assert again == s and again.content_hash() == s.content_hash()


def test_defaults():
    data = make_solution(spec={"languages": ["Triton"], "entry_point": "main.py::run"})
    del data["author"]
    s = Solution.from_dict(data)
    assert s.author == "unknown"
    assert s.spec.languages == ("triton",)  # lower-cased
    assert s.spec.target_hardware == ("LOCAL",)
    assert s.spec.destination_passing_style is True  # SOL-ExecBench's default
    assert s.spec.compile_options is None


def test_language_singular_alias():
    s = Solution.from_dict(make_solution(spec={"language": "cuda_cpp", "entry_point": "main.py::run"}))
    assert s.spec.languages == ("cuda_cpp",)


def test_compile_options():
    spec = BuildSpec.from_dict({"languages": ["cuda_cpp"], "entry_point": "k.cu::run",
                                "compile_options": {"cuda_cflags": ["-O2"]}})
    assert spec.compile_options.cuda_cflags == ("-O2",)
    assert spec.compile_options.cflags == ()
    assert BuildSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(SpecError, match="list of strings"):
        BuildSpec.from_dict({"languages": ["cuda_cpp"], "entry_point": "k.cu::run",
                             "compile_options": {"cflags": "-O3"}})
    with pytest.raises(SpecError, match="unknown key 'nvcc_flags'"):
        BuildSpec.from_dict({"languages": ["cuda_cpp"], "entry_point": "k.cu::run",
                             "compile_options": {"nvcc_flags": []}})


def test_sources_read_next_to_the_solution_file(tmp_path):
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "main.py").write_text(KERNEL)
    data = make_solution(sources=[{"path": "kernels/main.py"}],
                         spec={"languages": ["pytorch"], "entry_point": "kernels/main.py::run"})
    (tmp_path / "solution.json").write_text(json.dumps(data))
    s = load_solution(tmp_path / "solution.json")
    assert s.sources[0].path == "kernels/main.py"
    assert s.sources[0].content == KERNEL


def test_path_source_needs_a_folder_and_a_file(tmp_path):
    data = make_solution(sources=[{"path": "main.py"}])
    with pytest.raises(SpecError, match="no folder"):
        Solution.from_dict(data)
    with pytest.raises(SpecError, match="does not exist"):
        Solution.from_dict(data, base_dir=tmp_path)


@pytest.mark.parametrize("path", ["/etc/passwd", "C:/x.py", "c:x.py", "../secret.py", "a/../../b.py",
                                  ".hidden.py", "a/.git/config", "a\\b.py", "a\x00.py", "", "  ", None, 3])
def test_bad_source_paths(path):
    with pytest.raises(SpecError):
        check_source_path(path)


@pytest.mark.parametrize("path", ["/etc/hostname", "../outside.py", ".env", "sub\\x.py"])
def test_bad_path_rejected_before_reading(tmp_path, monkeypatch, path):
    """The path check happens before any file is opened: nothing is read for a bad path."""
    (tmp_path / "outside.py").write_text(KERNEL)
    folder = tmp_path / "solution"
    folder.mkdir()
    (folder / ".env").write_text("SECRET=1")
    opened: list[Path] = []
    real_read_text = Path.read_text

    def spy(self, *args, **kwargs):
        opened.append(self)
        return real_read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", spy)
    with pytest.raises(SpecError, match="source path"):
        Solution.from_dict(make_solution(sources=[{"path": path}]), base_dir=folder)
    assert opened == []


def test_good_paths_are_normalised():
    assert check_source_path("a/b.py") == "a/b.py"
    assert check_source_path("./a.py") == "a.py"


def test_duplicate_paths():
    with pytest.raises(SpecError, match="duplicate source paths"):
        Solution.from_dict(make_solution(sources=[{"path": "main.py", "content": KERNEL},
                                                  {"path": "main.py", "content": "x = 1\n"}]))


@pytest.mark.parametrize("entry", ["main.py", "main.py:run", "main.py::", "::run", "a::b::c", 3, None])
def test_entry_point_format(entry):
    with pytest.raises(SpecError, match="entry_point"):
        Solution.from_dict(make_solution(spec={"languages": ["pytorch"], "entry_point": entry}))


def test_entry_file_missing():
    with pytest.raises(SpecError, match="entry point file 'other.py' is not among the sources"):
        Solution.from_dict(make_solution(spec={"languages": ["pytorch"], "entry_point": "other.py::run"}))


@pytest.mark.parametrize(("data", "message"), [
    ({"sources": []}, "at least one source"),
    ({"sources": "main.py"}, "at least one source"),
    ({"sources": ["main.py"]}, "must be an object"),
    ({"sources": [{"path": "main.py", "content": 3}]}, "must be text"),
    ({"sources": [{"path": "main.py", "content": KERNEL, "mode": "0755"}]}, "unknown key 'mode'"),
    ({"spec": {"languages": [], "entry_point": "main.py::run"}}, "non-empty list"),
    ({"spec": {"languages": [3], "entry_point": "main.py::run"}}, "non-empty list"),
    ({"spec": {"languages": ["pytorch"], "entry_point": "main.py::run", "binding": "nanobind"}}, "binding"),
    ({"spec": {"languages": ["pytorch"], "entry_point": "main.py::run", "destination_passing_style": "no"}},
     "true or false"),
    ({"spec": {"languages": ["pytorch"], "entry_point": "main.py::run", "timeout": 3}}, "unknown key 'timeout'"),
    ({"spec": []}, "spec: must be an object"),
    ({"language_version": 3}, "unknown key 'language_version'"),
])
def test_bad_solution(data, message):
    with pytest.raises(SpecError, match=message):
        Solution.from_dict(make_solution(**data))


@pytest.mark.parametrize("languages", ["", [""], ["pytorch", " "]])
def test_empty_language_name(languages):
    with pytest.raises(SpecError, match="language"):
        Solution.from_dict(make_solution(spec={"languages": languages, "entry_point": "main.py::run"}))


@pytest.mark.parametrize("key", ["name", "definition", "spec", "sources"])
def test_missing_key(key):
    data = make_solution()
    del data[key]
    with pytest.raises(SpecError, match=repr(key)):
        Solution.from_dict(data)


def test_json_errors_name_the_file(tmp_path):
    path = tmp_path / "solution.json"
    path.write_text("{not json")
    with pytest.raises(SpecError, match="not valid JSON"):
        load_solution(path)
    path.write_text(json.dumps(make_solution(sources=[])))
    with pytest.raises(SpecError, match=f"{path}: solution needs"):
        load_solution(path)


def test_load_solution_missing_or_unknown_suffix(tmp_path):
    with pytest.raises(SpecError, match="does not exist"):
        load_solution(tmp_path / "nope.py")
    (tmp_path / "k.txt").write_text("x")
    with pytest.raises(SpecError, match=".json, .py or .cu"):
        load_solution(tmp_path / "k.txt")


# -- bare files -----------------------------------------------------------------------------

def test_bare_py_value_returning(tmp_path, definition):
    path = tmp_path / "torch_mul.py"
    path.write_text(KERNEL)
    s = load_solution(path, definition)
    assert s.name == "torch_mul" and s.definition == "scale_rows"
    assert s.spec.languages == ("pytorch",)
    assert s.spec.entry_point == "torch_mul.py::run"
    assert s.spec.destination_passing_style is False
    assert s.sources[0].content == KERNEL


def test_bare_py_destination_passing(tmp_path, definition):
    path = tmp_path / "dps.py"
    path.write_text("def run(x, weight, y):\n    y.copy_(x * weight)\n")
    assert load_solution(path, definition).spec.destination_passing_style is True


def test_bare_py_triton_detected(definition):
    src = "import torch\nimport triton\nimport triton.language as tl\n\ndef run(x, weight):\n    return x\n"
    assert solution_from_source("k.py", src, definition).spec.languages == ("triton",)
    src = "from triton import language as tl\n\ndef run(x, weight):\n    return x\n"
    assert solution_from_source("k.py", src, definition).spec.languages == ("triton",)
    src = "# mentions triton but does not import it\ndef run(x, weight):\n    return x\n"
    assert solution_from_source("k.py", src, definition).spec.languages == ("pytorch",)


LANGUAGE_CASES = [
    ("import triton\n", "triton"),
    ("import torch, triton.language as tl\n", "triton"),
    ("from triton.language import extra\n", "triton"),
    ("def helper():\n    import triton\n    return triton\n", "triton"),  # anywhere in the module
    ("try:\n    import triton\nexcept ImportError:\n    triton = None\n", "triton"),
    ('"""Example:\n\nimport triton\n"""\nimport torch\n', "pytorch"),  # a docstring is not an import
    ("import torch\nDOC = '''\nfrom triton import jit\n'''\n", "pytorch"),
    ("# import triton\nimport torch\n", "pytorch"),
    ("from .triton import kernels\n", "pytorch"),  # a relative import names a local module
    ("import tritonclient\n", "pytorch"),
]


@pytest.mark.parametrize("prefix,language", LANGUAGE_CASES)
def test_bare_py_language_is_what_the_code_imports(definition, prefix, language):
    src = prefix + "\ndef run(x, weight):\n    return x\n"
    assert solution_from_source("k.py", src, definition).spec.languages == (language,)


def test_bare_py_language_declared_in_the_header(definition):
    body = "\ndef run(x, weight):\n    return x\n"
    declared = "# solbench: problem=scale_rows language=Triton\nimport triton\n" + body
    assert solution_from_source("k.py", declared, definition).spec.languages == ("triton",)
    # a declaration wins over detection where it is plausible: a PyTorch file may import triton for a helper
    as_torch = "# solbench: problem=scale_rows language=pytorch\nimport triton\n" + body
    assert solution_from_source("k.py", as_torch, definition).spec.languages == ("pytorch",)
    with pytest.raises(SpecError, match="declares language=triton but never imports triton"):
        solution_from_source("k.py", '# solbench: problem=scale_rows language=triton\n"""import triton"""' + body,
                             definition)
    with pytest.raises(SpecError, match="compiled language"):
        solution_from_source("k.py", "# solbench: problem=scale_rows language=cuda_cpp\n" + body, definition)
    with pytest.raises(SpecError, match="declares language=triton; a .cu file is .*cuda_cpp"):
        solution_from_source("k.cu", "// solbench: problem=scale_rows language=triton\n" + CU_VALUE, definition)
    cu = solution_from_source("k.cu", "// solbench: problem=scale_rows language=cuda_cpp\n" + CU_VALUE, definition)
    assert cu.spec.languages == ("cuda_cpp",)


def test_bare_py_syntax_error_is_not_labelled_by_its_text(definition):
    """A file that does not parse cannot be read for imports: it is `pytorch` (or what it declares)
    and fails to load as a COMPILE_ERROR, instead of being labelled from text that mentions triton."""
    broken = "import triton\ndef run(x, weight:\n"
    assert solution_from_source("k.py", broken, definition).spec.languages == ("pytorch",)
    declared = "# solbench: language=triton\nimport triton\ndef run(x, weight:\n"
    assert solution_from_source("k.py", declared, definition).spec.languages == ("triton",)


def test_bare_py_signature_matches_neither(definition):
    with pytest.raises(SpecError, match="should take 2 \\(returning outputs\\) or 3 \\(writing into outputs\\)"):
        solution_from_source("k.py", "def run(x):\n    return x\n", definition)
    with pytest.raises(SpecError, match="run takes 4 parameters"):
        solution_from_source("k.py", "def run(a, b, c, d):\n    pass\n", definition)


def test_bare_py_without_run(definition):
    with pytest.raises(SpecError, match="no top-level function 'run'"):
        solution_from_source("k.py", "def forward(x, weight):\n    return x\n", definition)



def test_bare_py_syntax_error_loads_and_fails_later(definition):
    """A file that does not parse still loads (it is reported as a COMPILE_ERROR per workload)."""
    broken = "def run(x, weight:\n"
    s = solution_from_source("k.py", broken, definition)
    assert s.sources[0].content == broken


def test_bare_py_varargs_defaults_to_dps(definition):
    assert solution_from_source("k.py", "def run(*args):\n    pass\n", definition).spec.destination_passing_style


def test_header_names_the_problem(tmp_path):
    path = tmp_path / "k.py"
    path.write_text("# solbench: problem=rmsnorm_h4096\n" + KERNEL)
    s = load_solution(path)  # no definition needed: the header names the problem
    assert s.definition == "rmsnorm_h4096"
    assert s.spec.destination_passing_style is True  # cannot infer without a definition


def test_header_variants():
    assert problem_named_in("#!/usr/bin/env python\n# solbench: problem = a.b-c_1\n") == "a.b-c_1"
    assert problem_named_in("// solbench:problem=gemm_n4096_k4096\n") == "gemm_n4096_k4096"
    assert problem_named_in('"""solbench: problem=x"""\n') == "x"
    assert problem_named_in("\n" * 40 + "# solbench: problem=late\n") is None  # only the top of the file
    assert problem_named_in("# problem=x\n") is None


def test_bare_without_header_or_definition():
    with pytest.raises(SpecError, match="name the problem"):
        solution_from_source("k.py", KERNEL, None)


def test_header_wins_over_definition(definition):
    s = solution_from_source("k.py", "# solbench: problem=other\n" + KERNEL, definition)
    assert s.definition == "other"


CU_DPS = """// solbench: problem=scale_rows
#include <torch/extension.h>

__global__ void run_kernel(const float* x, const float* w, float* y, int n) {}

void run(const torch::Tensor& x,
         torch::Tensor weight,
         torch::Tensor &y) {
  run_kernel<<<1, 1>>>(nullptr, nullptr, nullptr, 0);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); }
"""

CU_VALUE = """#include <torch/extension.h>
torch::Tensor run(torch::Tensor x, torch::Tensor weight) {
  return x * weight;
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); }
"""


def test_bare_cu(tmp_path, definition):
    path = tmp_path / "cuda_mul.cu"
    path.write_text(CU_DPS)
    s = load_solution(path, definition)
    assert s.definition == "scale_rows"
    assert s.spec.languages == ("cuda_cpp",)
    assert s.spec.entry_point == "cuda_mul.cu::run"
    assert s.spec.destination_passing_style is True
    assert solution_from_source("v.cu", CU_VALUE, definition).spec.destination_passing_style is False


def test_bare_cu_wrong_arity(definition):
    src = "void run(torch::Tensor x) {\n}\n"
    with pytest.raises(SpecError, match="run takes 1 parameters"):
        solution_from_source("k.cu", src, definition)


def test_bare_source_bad_name(definition):
    with pytest.raises(SpecError, match="source path"):
        solution_from_source("../k.py", KERNEL, definition)


# -- hashing and the reference --------------------------------------------------------------

def test_content_hash_stable_and_sensitive():
    base = Solution.from_dict(make_solution())
    assert base.content_hash() == Solution.from_dict(make_solution()).content_hash()
    assert len(base.content_hash()) == 16
    renamed = Solution.from_dict(make_solution(name="other", author="else", description="d"))
    assert renamed.content_hash() == base.content_hash()
    edited = Solution.from_dict(make_solution(sources=[{"path": "main.py", "content": KERNEL + "# tweak\n"}]))
    assert edited.content_hash() != base.content_hash()
    dps = Solution.from_dict(make_solution(spec={"languages": ["pytorch"], "entry_point": "main.py::run",
                                                 "destination_passing_style": True}))
    assert dps.content_hash() != base.content_hash()
    moved = Solution.from_dict(make_solution(sources=[{"path": "main.py", "content": KERNEL},
                                                      {"path": "util.py", "content": "X = 1\n"}]))
    swapped = Solution.from_dict(make_solution(sources=[{"path": "util.py", "content": "X = 1\n"},
                                                        {"path": "main.py", "content": KERNEL}]))
    assert moved.content_hash() == swapped.content_hash()  # source order does not matter
    assert moved.content_hash() != base.content_hash()


def test_reference_solution(definition):
    s = reference_solution(definition)
    assert s.definition == "scale_rows"
    assert s.spec.destination_passing_style is False
    assert s.spec.languages == ("pytorch",)
    assert s.source(s.spec.entry_file).content == definition.reference
