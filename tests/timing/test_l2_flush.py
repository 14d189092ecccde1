"""Cache-flush sizing and that flush() really writes the whole buffer."""

from __future__ import annotations

import pytest
import torch

from solbench.timing import l2_flush
from solbench.timing.l2_flush import L2Flusher, cpu_cache_bytes, cpu_flush_bytes, parse_cache_size


@pytest.mark.parametrize(("text", "expected"), [("32768K\n", 32 << 20), ("48K", 48 << 10), ("1M", 1 << 20),
                                                ("2G", 2 << 30), ("512", 512), ("256KiB", 256 << 10),
                                                ("garbage", None), ("", None)])
def test_parse_cache_size(text, expected):
    assert parse_cache_size(text) == expected


def _fake_sysfs(tmp_path, sizes):
    for i, size in enumerate(sizes):
        (tmp_path / f"index{i}").mkdir()
        (tmp_path / f"index{i}" / "size").write_text(size + "\n")
    return tmp_path


def test_cpu_size_is_twice_the_largest_level(tmp_path):
    d = _fake_sysfs(tmp_path, ["48K", "32K", "1024K", "16384K"])
    assert cpu_cache_bytes(d) == 16 << 20
    assert cpu_flush_bytes(d) == 32 << 20


def test_cpu_size_fallback_and_cap(tmp_path):
    assert cpu_flush_bytes(tmp_path / "missing") == l2_flush.CPU_FALLBACK_BYTES
    d = _fake_sysfs(tmp_path, ["1024M"])
    assert cpu_flush_bytes(d) == l2_flush.CPU_CAP_BYTES


def test_real_sysfs_or_fallback_is_sane():
    size = L2Flusher("cpu", size_bytes=None).size_bytes
    assert l2_flush.MIN_FLUSH_BYTES <= size <= l2_flush.CPU_CAP_BYTES


def test_flush_overwrites_the_whole_buffer_with_a_new_value():
    f = L2Flusher("cpu", size_bytes=1 << 20)
    f.flush()
    first = f._buffer.copy()
    assert bool((first == first[0]).all())
    f.flush()
    second = f._buffer
    assert bool((second == second[0]).all())
    assert int(first[0]) != int(second[0])  # every byte rewritten, with a different value
    assert f.flush_count == 2 and second.nbytes == 1 << 20


@pytest.mark.gpu
def test_cuda_flusher_is_at_least_twice_l2():
    dev = torch.device("cuda", torch.cuda.current_device())
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    writer, reader = L2Flusher(dev, mode="write"), L2Flusher(dev)
    for f in (writer, reader):
        assert f.size_bytes >= 2 * l2
        assert f._buffer.is_cuda and f._buffer.numel() * 4 >= 2 * l2 - 4
        f.flush()
    torch.cuda.synchronize()
    assert int(writer._buffer[-1]) == 1  # the write sweep reached the end of the buffer
    assert reader.mode == "read" and int(reader._sink) == 0  # the read sweep summed the (zero) buffer


def test_flush_modes_are_checked_and_the_read_reduction_runs():
    with pytest.raises(ValueError):
        L2Flusher("cpu", mode="sideways")
    # the read flush's sweep, as issued on CUDA, on CPU tensors
    buffer, sink = torch.arange(1000, dtype=torch.int32), torch.zeros((), dtype=torch.int64)
    l2_flush.read_sweep(buffer, sink)
    assert int(sink) == 999 * 1000 // 2
