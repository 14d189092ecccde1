"""Calling a reference's `custom_inputs_entrypoint(axes_and_scalars, device)` deterministically.

The entrypoint is author code that usually draws from the global torch RNG, and sometimes from its
own `torch.Generator` seeded with a constant (`manual_seed(42)`), which would make its "random"
inputs identical in every run of every user (a solution could recognise them and replay cached
outputs). So, for the duration of one call only:

* the global RNGs (torch CPU, the target CUDA device, Python `random`, NumPy) are seeded from the
  run seed and restored afterwards (`torch.random.fork_rng`), so the output depends on the seed and
  nothing else, and the caller's RNG state is neither read nor disturbed;
* `torch.Generator` is replaced by a subclass whose seeds are mixed with the run seed: a fresh
  generator starts from a seed derived from the run seed (not torch's fixed default), and
  `manual_seed(s)` / `seed()` seed from `derive_seed(run_seed, s)`. Determinism per run seed is
  kept; constancy across runs is not. (Code that bound `Generator` by `from torch import
  Generator` before the call is not affected.)
"""

from __future__ import annotations

import random
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch

from solbench.inputs.errors import InputError
from solbench.inputs.seeds import derive_seed


@contextmanager
def isolated_global_rng(seed: int, device: torch.device) -> Iterator[None]:
    """Seed every global RNG the entrypoint may use from `seed`; restore them all afterwards."""
    cuda = [device.index if device.index is not None else torch.cuda.current_device()] \
        if device.type == "cuda" else []
    python_state = random.getstate()
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy is a dependency of torch's tooling here
        numpy = None
    numpy_state = numpy.random.get_state() if numpy is not None else None
    with torch.random.fork_rng(devices=cuda):
        torch.default_generator.manual_seed(derive_seed(seed, "global-torch"))
        for index in cuda:
            torch.cuda.default_generators[index].manual_seed(derive_seed(seed, "global-torch"))
        random.seed(derive_seed(seed, "global-python"))
        if numpy is not None:
            numpy.random.seed(derive_seed(seed, "global-numpy") % 2**32)
        try:
            yield
        finally:
            random.setstate(python_state)
            if numpy is not None:
                numpy.random.set_state(numpy_state)


@contextmanager
def run_seeded_generators(seed: int) -> Iterator[None]:
    """Make `torch.Generator(...)`, `.manual_seed(s)` and `.seed()` depend on the run seed."""
    original = torch.Generator
    counter = {"new": 0, "seed": 0}

    class RunSeededGenerator(original):  # type: ignore[misc, valid-type]
        def __new__(cls, *args, **kwargs):
            generator = original.__new__(cls, *args, **kwargs)
            counter["new"] += 1
            original.manual_seed(generator, derive_seed(seed, "custom-generator-new", counter["new"]))
            return generator

        def manual_seed(self, value):
            return original.manual_seed(self, derive_seed(seed, "custom-generator", int(value)))

        def seed(self):
            counter["seed"] += 1
            value = derive_seed(seed, "custom-generator-seed", counter["seed"])
            original.manual_seed(self, value)
            return value

    torch.Generator = RunSeededGenerator
    try:
        yield
    finally:
        torch.Generator = original


def call_entrypoint(entrypoint: Callable, axes_and_scalars: Mapping[str, Any], device: torch.device,
                    seed: int) -> dict[str, Any]:
    """Call the entrypoint once, isolated and seeded; its result must be a mapping of names."""
    name = getattr(entrypoint, "__name__", "custom_inputs_entrypoint")
    try:
        with isolated_global_rng(seed, device), run_seeded_generators(seed):
            result = entrypoint(dict(axes_and_scalars), device)
    except Exception as exc:  # the reference's code: any failure is the reference's
        tail = "".join(traceback.format_exception(exc)[-6:])
        raise InputError(f"custom inputs entrypoint {name}() failed: {type(exc).__name__}: {exc}\n{tail}",
                         blame="reference") from exc
    if not isinstance(result, Mapping):
        raise InputError(f"custom inputs entrypoint {name}() returned {type(result).__name__}, "
                         f"expected a dict of input name -> value", blame="reference")
    return dict(result)
