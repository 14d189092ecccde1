"""Raw-byte comparison used to see which inputs a call wrote: chunked, exact, NaN-safe."""

import pytest
import torch

from solbench.worker import inputs_cache as worker_calls


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(worker_calls, "COMPARE_CHUNK_BYTES", 16)


def test_a_change_in_the_last_chunk_is_seen():
    x = torch.arange(100, dtype=torch.float32)
    y = x.clone()
    assert worker_calls.bytes_equal(x, y)
    y[-1] = 1e9
    assert not worker_calls.bytes_equal(x, y)


def test_nan_equals_itself_and_signed_zeros_differ():
    x = torch.tensor([float("nan"), 0.0, 1.0] * 10)
    assert worker_calls.bytes_equal(x, x.clone())
    y = x.clone()
    y[1] = -0.0
    assert not worker_calls.bytes_equal(x, y)


def test_changed_tensors_names_only_the_written_input():
    before = [torch.ones(40), torch.zeros(7, 3, dtype=torch.bfloat16), None]
    after = [t.clone() if t is not None else 3 for t in before]
    after[1][6, 2] = 5
    assert worker_calls.changed_tensors(before, after) == [1]
