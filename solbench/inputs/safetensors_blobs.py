"""Tensors that a workload takes from `.safetensors` files (FlashInfer-Bench style).

A workload names a relative `path` and a `tensor_key`. The path is tried under each data root in
order (the problem folder first, then the roots the user configured: `--data-root`,
`$SOLBENCH_DATA_ROOT` (os.pathsep-separated), `$FLASHINFER_TRACE_DIR`); under each root the full
relative path is tried first, then with leading components stripped one at a time (published
workloads carry paths relative to the machine that recorded them). First hit wins.

A file or key that is not here raises `MissingDataError` (the runner reports MISSING_DATA); a
tensor that is here but has the wrong shape or dtype raises `InputError` (the data does not fit the
definition). Loaded tensors are cached per process (CPU, by resolved path, key and file mtime);
callers always get a fresh device copy, so a solution that writes into its inputs cannot change
what the next trial or the reference sees.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

import torch

from solbench.inputs.errors import InputError, MissingDataError
from solbench.spec import dtypes

ENV_DATA_ROOT = "SOLBENCH_DATA_ROOT"
ENV_FLASHINFER = "FLASHINFER_TRACE_DIR"
_CACHE_ENTRIES = 64
_cache: OrderedDict[tuple[str, str, int], torch.Tensor] = OrderedDict()


def default_data_roots(problem_dir: Path | None = None, extra: Sequence[Path | str] = ()) -> list[Path]:
    """The ordered roots: problem folder, `extra` (e.g. --data-root), then the environment's."""
    roots: list[Path] = []
    if problem_dir is not None:
        roots.append(Path(problem_dir))
    roots.extend(Path(r) for r in extra)
    roots.extend(Path(p) for p in os.environ.get(ENV_DATA_ROOT, "").split(os.pathsep) if p)
    if os.environ.get(ENV_FLASHINFER):
        roots.append(Path(os.environ[ENV_FLASHINFER]))
    seen, unique = set(), []
    for root in roots:
        if str(root) not in seen:
            seen.add(str(root))
            unique.append(root)
    return unique


def candidate_paths(relative: str) -> list[PurePosixPath]:
    """The relative path, then with leading components stripped one at a time."""
    pure = PurePosixPath(relative.replace("\\", "/"))
    parts = [p for p in pure.parts if p not in ("/", "")]
    if not parts or ".." in parts:
        raise InputError(f"safetensors path {relative!r} is empty or leaves its data root ('..')")
    return [PurePosixPath(*parts[i:]) for i in range(len(parts))]


def resolve_blob(relative: str, roots: Sequence[Path]) -> Path:
    """The first existing file for `relative` under `roots`; MissingDataError listing what was tried."""
    candidates = candidate_paths(relative)
    for root in roots:
        for candidate in candidates:
            path = Path(root) / candidate
            if path.is_file():
                return path
    where = ", ".join(str(r) for r in roots) or "(no data roots configured)"
    raise MissingDataError(
        f"safetensors file {relative!r} not found under any data root: {where}. Download the blobs and "
        f"pass --data-root DIR (or set ${ENV_DATA_ROOT} / ${ENV_FLASHINFER})")


def _load_cpu(path: Path, key: str) -> torch.Tensor:
    from safetensors import SafetensorError, safe_open

    stamp = path.stat().st_mtime_ns
    cache_key = (str(path.resolve()), key, stamp)
    if cache_key in _cache:
        _cache.move_to_end(cache_key)
        return _cache[cache_key]
    try:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            keys = list(handle.keys())
            if key not in keys:
                shown = ", ".join(keys[:20]) + (" ..." if len(keys) > 20 else "")
                raise MissingDataError(f"{path} has no tensor {key!r} (it has: {shown or 'nothing'})")
            tensor = handle.get_tensor(key)
    except SafetensorError as exc:
        raise InputError(f"{path} is not a readable safetensors file: {exc}") from None
    _cache[cache_key] = tensor
    while len(_cache) > _CACHE_ENTRIES:
        _cache.popitem(last=False)
    return tensor


def load_blob(relative: str, key: str, roots: Sequence[Path], shape: tuple[int, ...], dtype_name: str,
              device: torch.device | str, input_name: str = "") -> torch.Tensor:
    """The tensor `key` of file `relative`, checked against the declared shape and dtype, on `device`."""
    path = resolve_blob(relative, roots)
    tensor = _load_cpu(path, key)
    what = f"input {input_name!r} " if input_name else ""
    if tuple(tensor.shape) != tuple(shape):
        raise InputError(f"{what}from {path}:{key} has shape {tuple(tensor.shape)}, the definition "
                         f"resolves it to {tuple(shape)}")
    expected = dtypes.torch_dtype(dtype_name)
    if tensor.dtype != expected:
        raise InputError(f"{what}from {path}:{key} has dtype {tensor.dtype}, the definition declares {dtype_name}")
    device = torch.device(device)
    if device.type == "meta":
        return torch.empty(tensor.shape, dtype=tensor.dtype, device=device)
    return tensor.to(device, copy=True).contiguous()


def clear_cache() -> None:
    _cache.clear()
