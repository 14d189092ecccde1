"""Raw-byte comparison used to see which inputs a call wrote: chunked, exact, NaN-safe."""

import pytest
import torch

from solbench.check import outputs as byte_check
from solbench.worker import inputs_cache as worker_calls


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(byte_check, "COMPARE_CHUNK_BYTES", 16)


def test_a_change_in_the_last_chunk_is_seen():
    x = torch.arange(100, dtype=torch.float32)
    y = x.clone()
    assert byte_check.bytes_equal(x, y)
    y[-1] = 1e9
    assert not byte_check.bytes_equal(x, y)


def test_nan_equals_itself_and_signed_zeros_differ():
    x = torch.tensor([float("nan"), 0.0, 1.0] * 10)
    assert byte_check.bytes_equal(x, x.clone())
    y = x.clone()
    y[1] = -0.0
    assert not byte_check.bytes_equal(x, y)


def test_changed_tensors_names_only_the_written_input():
    before = [torch.ones(40), torch.zeros(7, 3, dtype=torch.bfloat16), None]
    after = [t.clone() if t is not None else 3 for t in before]
    after[1][6, 2] = 5
    assert worker_calls.changed_tensors(before, after) == [1]


@pytest.mark.parametrize("dtype", [torch.uint8, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("count", [1, 3, 8, 37])
def test_any_single_byte_change_is_seen_whatever_the_word_size(dtype, count):
    """Bytes are compared as the widest words that tile them; every byte still counts, also in odd sizes
    and in views that start inside a word."""
    base = torch.arange(count + 5, dtype=torch.float64).to(dtype)
    for x in (base[:count], base[1:count + 1]):
        for byte in range(x.numel() * x.element_size()):
            y = x.clone()
            y.view(torch.uint8)[byte] ^= 1
            assert byte_check.bytes_equal(x, x.clone()) and not byte_check.bytes_equal(x, y)
