"""Seeds and private generators.

Inputs must not depend on the global torch RNG: a solution can reseed it (or read its state) and
make later "random" inputs predictable. Every tensor is drawn from its own `torch.Generator`,
seeded from `derive_seed(run_seed, workload uuid, purpose, index, ...)`. The derivation is a hash,
so the reference worker and the solution worker, given the same run seed, draw identical values
without any tensor crossing a process boundary; and nothing about one workload or input leaks
into another.
"""

from __future__ import annotations

import hashlib
import secrets
import struct

import torch

SEED_BITS = 63  # fits torch's int64 seed argument and JSON integers


def derive_seed(run_seed: int, *parts: str | int) -> int:
    """A 63-bit seed from a run seed and any number of labels (sha256; order and type matter)."""
    if isinstance(run_seed, bool) or not isinstance(run_seed, int):
        raise TypeError(f"run_seed must be an int, got {type(run_seed).__name__}")
    digest = hashlib.sha256()
    for part in (run_seed, *parts):
        if isinstance(part, bool) or not isinstance(part, (int, str)):
            raise TypeError(f"seed parts must be str or int, got {part!r}")
        tag = b"i" if isinstance(part, int) else b"s"
        data = str(part).encode()
        # Tag and length prefix: ("ab", "c") and ("a", "bc"), or 1 and "1", never collide.
        digest.update(tag + len(data).to_bytes(8, "little") + data)
    return int.from_bytes(digest.digest()[:8], "little") >> (64 - SEED_BITS)


def call_seed(block_key: int, source: int, nonce: int) -> int:
    """The input seed of a timed call: the orchestrator's block key, the index of the call that drew the set
    and the worker's nonce for it. The orchestrator recomputes it from those, so a seed reported by the
    solution's process is never taken on trust: a kept output cannot be relabelled to the inputs of
    another call (whose answer it knows) without a second preimage of the hash. One short keyed-style hash
    (blake2b over three 64-bit words): it runs before every timed call."""
    words = struct.pack("<QQQ", block_key, source, nonce)
    return int.from_bytes(hashlib.blake2b(words, digest_size=8, person=b"solbench-call").digest(), "little") >> (64 - SEED_BITS)


def new_run_seed() -> int:
    """A fresh unpredictable run seed (from the OS CSPRNG, not from any torch or Python RNG)."""
    return secrets.randbits(SEED_BITS)


def generator_device(device: torch.device | str) -> torch.device:
    """Where a generator for `device` lives: the device itself, except `meta` (CPU, never drawn)."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu") if device.type == "meta" else device


def make_generator(seed: int, device: torch.device | str) -> torch.Generator:
    """A private generator on `device` (a CUDA generator draws on the GPU: fast for big tensors)."""
    generator = torch.Generator(device=generator_device(device))
    generator.manual_seed(seed)
    return generator
