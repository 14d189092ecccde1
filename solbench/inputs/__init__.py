"""Turning a workload into concrete arguments: seeded private generators, per-dtype random
tensors, name heuristics, scalars, safetensors blobs and custom entrypoints."""

from solbench.inputs.errors import InputError, MissingDataError
from solbench.inputs.fp4 import pack_fp4, unpack_fp4
from solbench.inputs.generate import FILLS, allocate_outputs, fill_value, make_inputs, needs_second_fill
from solbench.inputs.safetensors_blobs import default_data_roots
from solbench.inputs.seeds import derive_seed, make_generator, new_run_seed

__all__ = [
    "FILLS", "InputError", "MissingDataError", "allocate_outputs", "default_data_roots", "derive_seed",
    "fill_value", "make_generator", "make_inputs", "needs_second_fill", "new_run_seed", "pack_fp4",
    "unpack_fp4",
]
