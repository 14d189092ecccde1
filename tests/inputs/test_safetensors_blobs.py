import pytest
import torch
from safetensors.torch import save_file

from solbench.inputs import make_inputs
from solbench.inputs.errors import InputError, MissingDataError
from solbench.inputs.safetensors_blobs import (
    candidate_paths,
    clear_cache,
    default_data_roots,
    load_blob,
    resolve_blob,
)
from tests.inputs.inputs_builders import build_definition, build_workload


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


def write(path, **tensors):
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path))
    return path


def test_candidate_paths_strip_leading_components():
    assert [str(p) for p in candidate_paths("a/b/c.safetensors")] == ["a/b/c.safetensors", "b/c.safetensors",
                                                                      "c.safetensors"]
    with pytest.raises(InputError):
        candidate_paths("../etc/x.safetensors")


def test_full_path_preferred_then_stripped(tmp_path):
    full = write(tmp_path / "root" / "traces" / "blob" / "x.safetensors", k=torch.ones(2))
    write(tmp_path / "root" / "blob" / "x.safetensors", k=torch.zeros(2))
    assert resolve_blob("traces/blob/x.safetensors", [tmp_path / "root"]) == full
    stripped = resolve_blob("/home/someone/elsewhere/blob/x.safetensors", [tmp_path / "root"])
    assert stripped == tmp_path / "root" / "blob" / "x.safetensors"


def test_first_root_wins(tmp_path):
    a = write(tmp_path / "a" / "x.safetensors", k=torch.ones(2))
    write(tmp_path / "b" / "x.safetensors", k=torch.zeros(2))
    assert resolve_blob("x.safetensors", [tmp_path / "a", tmp_path / "b"]) == a


def test_missing_file_is_missing_data_with_clear_text(tmp_path):
    with pytest.raises(MissingDataError) as info:
        resolve_blob("blobs/w.safetensors", [tmp_path])
    text = str(info.value)
    assert "blobs/w.safetensors" in text and str(tmp_path) in text and "--data-root" in text


def test_missing_key_is_missing_data_and_lists_keys(tmp_path):
    write(tmp_path / "x.safetensors", present=torch.ones(2))
    with pytest.raises(MissingDataError) as info:
        load_blob("x.safetensors", "absent", [tmp_path], (2,), "float32", "cpu")
    assert "absent" in str(info.value) and "present" in str(info.value)


def test_shape_and_dtype_mismatch_are_input_errors(tmp_path):
    write(tmp_path / "x.safetensors", k=torch.ones(2, 3))
    with pytest.raises(InputError) as info:
        load_blob("x.safetensors", "k", [tmp_path], (3, 2), "float32", "cpu", "q")
    assert not isinstance(info.value, MissingDataError)
    assert "(2, 3)" in str(info.value) and "(3, 2)" in str(info.value) and "'q'" in str(info.value)
    with pytest.raises(InputError) as info:
        load_blob("x.safetensors", "k", [tmp_path], (2, 3), "bfloat16", "cpu")
    assert "bfloat16" in str(info.value) and not isinstance(info.value, MissingDataError)


def test_loaded_copies_are_independent_of_the_cache(tmp_path):
    write(tmp_path / "x.safetensors", k=torch.arange(4, dtype=torch.int64))
    first = load_blob("x.safetensors", "k", [tmp_path], (4,), "int64", "cpu")
    first.fill_(-1)  # a solution scribbling over its input
    second = load_blob("x.safetensors", "k", [tmp_path], (4,), "int64", "cpu")
    assert second.tolist() == [0, 1, 2, 3]


def test_cache_notices_a_rewritten_file(tmp_path):
    import os

    path = write(tmp_path / "x.safetensors", k=torch.zeros(2))
    assert load_blob("x.safetensors", "k", [tmp_path], (2,), "float32", "cpu").tolist() == [0, 0]
    write(path, k=torch.ones(2))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert load_blob("x.safetensors", "k", [tmp_path], (2,), "float32", "cpu").tolist() == [1, 1]


def test_default_roots_order(tmp_path, monkeypatch):
    monkeypatch.setenv("SOLBENCH_DATA_ROOT", f"{tmp_path / 'e1'}{__import__('os').pathsep}{tmp_path / 'e2'}")
    monkeypatch.setenv("FLASHINFER_TRACE_DIR", str(tmp_path / "fi"))
    roots = default_data_roots(tmp_path / "problem", [tmp_path / "cli"])
    assert roots == [tmp_path / "problem", tmp_path / "cli", tmp_path / "e1", tmp_path / "e2", tmp_path / "fi"]


def test_make_inputs_reads_safetensors(tmp_path):
    values = torch.randn(3, 4)
    write(tmp_path / "blobs" / "w.safetensors", kv=values)
    d = build_definition({"kv": {"shape": ["n", 4], "dtype": "float32"}}, axes={"n": {"type": "var"}})
    w = build_workload({"kv": {"type": "safetensors", "path": "blobs/w.safetensors", "tensor_key": "kv"}}, {"n": 3})
    (got,) = make_inputs(d, w, {"n": 3}, seed=1, device="cpu", data_roots=[tmp_path])
    assert torch.equal(got, values)
    with pytest.raises(MissingDataError):
        make_inputs(d, w, {"n": 3}, seed=1, device="cpu", data_roots=[tmp_path / "nowhere"])
