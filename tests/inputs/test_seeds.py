import subprocess
import sys

import torch

from solbench.inputs.seeds import SEED_BITS, derive_seed, make_generator, new_run_seed


def test_derive_seed_is_deterministic_and_63_bit():
    a = derive_seed(7, "uuid-1", "correctness", 0)
    assert a == derive_seed(7, "uuid-1", "correctness", 0)
    assert 0 <= a < 2**SEED_BITS


def test_derive_seed_changes_with_every_part():
    base = derive_seed(7, "uuid-1", "correctness", 0)
    assert derive_seed(8, "uuid-1", "correctness", 0) != base
    assert derive_seed(7, "uuid-2", "correctness", 0) != base
    assert derive_seed(7, "uuid-1", "timing", 0) != base
    assert derive_seed(7, "uuid-1", "correctness", 1) != base


def test_derive_seed_parts_are_unambiguous():
    assert derive_seed(1, "ab", "c") != derive_seed(1, "a", "bc")
    assert derive_seed(1, 1) != derive_seed(1, "1")
    assert derive_seed(1, "a", "") != derive_seed(1, "a")


def test_derive_seed_rejects_other_types():
    import pytest

    with pytest.raises(TypeError):
        derive_seed(1, 1.5)
    with pytest.raises(TypeError):
        derive_seed("1", "x")


def test_new_run_seed_is_fresh_and_in_range():
    seeds = {new_run_seed() for _ in range(20)}
    assert len(seeds) == 20
    assert all(0 <= s < 2**SEED_BITS for s in seeds)


def test_new_run_seed_ignores_global_rngs():
    import random

    torch.manual_seed(0)
    random.seed(0)
    first = new_run_seed()
    torch.manual_seed(0)
    random.seed(0)
    assert new_run_seed() != first


def test_generators_with_same_seed_agree_and_differ_across_seeds():
    a = torch.randn(100, generator=make_generator(123, "cpu"))
    b = torch.randn(100, generator=make_generator(123, "cpu"))
    c = torch.randn(100, generator=make_generator(124, "cpu"))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_meta_device_gets_a_cpu_generator():
    assert make_generator(1, "meta").device.type == "cpu"


_CHILD = """
import hashlib, torch
from solbench.inputs.seeds import derive_seed, make_generator
g = make_generator(derive_seed(99, "uuid", "correctness", 3), "cpu")
print(hashlib.sha256(torch.randn(1000, generator=g).numpy().tobytes()).hexdigest())
"""


def test_two_processes_draw_identical_values():
    """The reference and solution workers regenerate inputs independently; they must agree."""
    outs = [subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True).stdout
            for _ in range(2)]
    assert outs[0] == outs[1] and len(outs[0].strip()) == 64
