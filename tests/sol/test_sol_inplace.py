"""Outputs that are inputs updated in place: only the region the reference writes (and reads) counts.
Every expected value is computed by hand in the test."""

from __future__ import annotations

from solbench.sol.analyser import analyse
from solbench.sol.hardware import load_spec
from solbench.sol.reject import faster_than_light, min_possible_time_ms

H100 = load_spec("H100_SXM")


def test_slice_copy_into_a_cache_writes_only_the_slice(definition_of):
    n, m, d = 64, 4, 8
    ref = "def run(cache, new):\n    cache[:4] = new\n    return cache\n"
    definition = definition_of({"cache": (["N", "D"], "float32"), "new": (["M", "D"], "float32")},
                               {"out": (["N", "D"], "float32")}, ref, {"N": n, "M": m, "D": d})
    cost = analyse(definition, {})
    # the old cache is never read; 4 rows of 8 fp32 are written; `new` is read once
    assert cost.bytes_by_tensor == {"cache": 0, "new": m * d * 4, "out": m * d * 4}
    assert cost.bytes_min == 256
    assert cost.output_bytes == 0  # rejection charges nothing for an input handed back
    assert any("updated in place: 32 of 512" in note for note in cost.notes)


def test_kv_cache_index_put_with_unknown_positions(definition_of):
    """`cache[:, :, pos] = k` with positions only known as a meta input: one row per index entry."""
    b, h, s, t, d = 2, 4, 1024, 3, 16
    ref = ("def run(k_cache, k, pos):\n"
           "    k_cache[:, :, pos] = k\n"
           "    return k_cache\n")
    definition = definition_of(
        {"k_cache": (["B", "H", "S", "D"], "bfloat16"), "k": (["B", "H", "T", "D"], "bfloat16"),
         "pos": (["T"], "int64")},
        {"k_cache_out": (["B", "H", "S", "D"], "bfloat16")}, ref, {"B": b, "H": h, "S": s, "T": t, "D": d})
    cost = analyse(definition, {})
    assert cost.method == "meta"
    written = b * h * t * d  # 384 elements of the 131,072 in the cache
    assert cost.bytes_by_tensor == {"k_cache": 0, "k": written * 2, "pos": t * 8, "k_cache_out": written * 2}
    assert cost.bytes_min == 384 * 2 + 384 * 2 + 24
    solar = analyse(definition, {}, convention="solar")
    assert solar.bytes_by_tensor["k_cache_out"] == written * 2


def test_known_duplicate_positions_write_once(definition_of):
    """Positions computed by the reference are real constants: [0, 2, 0] writes two distinct rows."""
    n, d = 32, 8
    ref = ("import torch\n"
           "def run(cache, rows):\n"
           "    pos = torch.arange(3, device=cache.device) * 2 % 4\n"
           "    cache.index_copy_(0, pos, rows)\n"
           "    return cache\n")
    definition = definition_of({"cache": (["N", "D"], "float16"), "rows": (["R", "D"], "float16")},
                               {"out": (["N", "D"], "float16")}, ref, {"N": n, "D": d, "R": 3})
    cost = analyse(definition, {})
    assert cost.bytes_by_tensor == {"cache": 0, "rows": 3 * d * 2, "out": 2 * d * 2}


def test_indexed_accumulate_reads_and_writes_the_touched_rows(definition_of):
    n, t, d = 100, 5, 4
    ref = "def run(acc, idx, src):\n    acc.index_add_(0, idx, src)\n    return acc\n"
    definition = definition_of({"acc": (["N", "D"], "float32"), "idx": (["T"], "int64"), "src": (["T", "D"], "float32")},
                               {"out": (["N", "D"], "float32")}, ref, {"N": n, "T": t, "D": d})
    cost = analyse(definition, {})
    # old values of the 5 touched rows are read, the same rows written
    assert cost.bytes_by_tensor == {"acc": t * d * 4, "idx": t * 8, "src": t * d * 4, "out": t * d * 4}


def test_pointwise_in_place_update_moves_the_whole_tensor(definition_of):
    n = 1000
    ref = "def run(x, y):\n    x.mul_(y)\n    return x\n"
    definition = definition_of({"x": (["N"], "float32"), "y": (["N"], "float32")},
                               {"out": (["N"], "float32")}, ref, {"N": n})
    cost = analyse(definition, {})
    assert cost.bytes_by_tensor == {"x": n * 4, "y": n * 4, "out": n * 4}
    assert cost.output_bytes == 0


def test_in_place_output_is_never_rejected(definition_of):
    """The rejection bound charges nothing for an updated input: even an instant kernel passes."""
    b, h, s, t, d = 1, 8, 1 << 16, 1, 128
    ref = "def run(cache, k, pos):\n    cache[:, :, pos] = k\n    return cache\n"
    definition = definition_of(
        {"cache": (["B", "H", "S", "D"], "bfloat16"), "k": (["B", "H", "T", "D"], "bfloat16"),
         "pos": (["T"], "int64")},
        {"out": (["B", "H", "S", "D"], "bfloat16")}, ref, {"B": b, "H": h, "S": s, "T": t, "D": d})
    cost = analyse(definition, {})
    assert min_possible_time_ms(cost, H100) == 0
    assert faster_than_light(1e-9, cost, H100) is None


def test_broadcast_output_is_charged_its_distinct_elements(definition_of):
    """A reference that returns an expanded (stride-0) view writes only the distinct values; a
    solution may return the same kind of view, so neither bytes nor rejection charge the repeats."""
    n, r = 256, 1024
    ref = "def run(x):\n    return (x * 2.0)[:, None].expand(-1, 1024)\n"
    definition = definition_of({"x": (["N"], "float32")}, {"out": (["N", "R"], "float32")}, ref, {"N": n, "R": r})
    cost = analyse(definition, {})
    assert cost.bytes_by_tensor == {"x": n * 4, "out": n * 4}
    assert cost.output_bytes == n * 4
    assert any(f"broadcast view: {n} distinct of {n * r}" in note for note in cost.notes)
    # measured at the time of writing 1 KiB: not faster than light, while the dense bound would be 1 MiB
    assert faster_than_light(0.0005, cost, H100) is None


def test_materialised_output_is_charged_in_full(definition_of):
    n, r = 256, 1024
    ref = "def run(x):\n    return (x * 2.0)[:, None].expand(-1, 1024).contiguous()\n"
    definition = definition_of({"x": (["N"], "float32")}, {"out": (["N", "R"], "float32")}, ref, {"N": n, "R": r})
    cost = analyse(definition, {})
    assert cost.bytes_by_tensor == {"x": n * 4, "out": n * r * 4}
    assert not any("broadcast" in note for note in cost.notes)
