"""Measuring what the current GPU actually achieves: copy bandwidth and matmul rates.

Methodology (kept honest): random data (never zeros, which some hardware compresses), a warm-up,
then the median of several reps each timed with CUDA events around a single op; a copy counts the
bytes read plus the bytes written; an n x n x n matmul counts 2 n^3 FLOPs. The result is a spec
marked `measured`, `based_on` the datasheet spec of the same GPU when known.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from solbench.sol.hardware import HardwareSpec, UnknownHardwareError, detect_spec, device_name, normalize


def _time_ms(fn, reps: int, warmup: int) -> float:
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_gbps(device: int = 0, n_bytes: int = 1 << 30, reps: int = 20, warmup: int = 3) -> float:
    """Device-to-device copy bandwidth, GB/s, counting bytes read + written."""
    import torch

    n = n_bytes // 4
    src = torch.rand(n, device=f"cuda:{device}")
    dst = torch.empty_like(src)
    ms = _time_ms(lambda: dst.copy_(src), reps, warmup)
    return 2 * n * 4 / (ms / 1e3) / 1e9


def matmul_tflops(dtype: str, device: int = 0, n: int = 8192, reps: int = 10, warmup: int = 3) -> float | None:
    """Achieved TFLOP/s of an n^3 matmul in `dtype` ("bfloat16", "float16", "tf32", "float32", "float8",
    "float64"); None when the GPU or torch cannot run it."""
    import torch

    dev = f"cuda:{device}"
    prev = torch.backends.cuda.matmul.allow_tf32
    try:
        if dtype == "float8":
            a = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn)
            b = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn).t()
            one = torch.ones((), device=dev)
            fn = lambda: torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16)  # noqa: E731
        else:
            torch_dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "tf32": torch.float32,
                           "float32": torch.float32, "float64": torch.float64}[dtype]
            torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
            a = torch.randn(n, n, device=dev, dtype=torch_dtype)
            b = torch.randn(n, n, device=dev, dtype=torch_dtype)
            fn = lambda: torch.mm(a, b)  # noqa: E731
        ms = _time_ms(fn, reps, warmup)
    except (RuntimeError, TypeError) as exc:
        if "out of memory" in str(exc):
            raise
        return None
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    return 2.0 * n**3 / (ms / 1e3) / 1e12


def measure(device: int = 0, name: str | None = None, quick: bool = False) -> HardwareSpec:
    """A measured spec of the current GPU (needs CUDA)."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("calibrate needs a CUDA GPU; none is visible")
    props = torch.cuda.get_device_properties(device)
    gpu = device_name(device)
    try:
        base: HardwareSpec | None = detect_spec(device)
    except UnknownHardwareError:
        base = None
    n = 4096 if quick else 8192
    reps = 5 if quick else 10
    rates = {
        "bf16_tflops": matmul_tflops("bfloat16", device, n, reps),
        "fp16_tflops": matmul_tflops("float16", device, n, reps),
        "tf32_tflops": matmul_tflops("tf32", device, n, reps),
        "fp32_simt_tflops": matmul_tflops("float32", device, n, reps),
        "fp8_tflops": matmul_tflops("float8", device, n, reps),
        "fp64_tflops": matmul_tflops("float64", device, n // 2, max(3, reps // 2)),
    }
    bandwidth = copy_gbps(device, (1 << 28) if quick else (1 << 30), reps=10 if quick else 20)
    spec_name = name or f"{(base.name if base else normalize(gpu).upper())}_MEASURED"
    how = (f"solbench hw calibrate on {gpu} (torch {torch.__version__}): median of {reps} CUDA-event-timed "
           f"reps after warm-up, random data; {n}^3 matmuls, 2*n^3 FLOPs; copy counts read+written bytes")
    common = dict(
        name=spec_name, hbm_bandwidth_gbps=round(bandwidth, 1),
        bf16_tflops=round(rates["bf16_tflops"] or 0.0, 1), fp16_tflops=round(rates["fp16_tflops"] or 0.0, 1),
        tf32_tflops=_round(rates["tf32_tflops"]), fp32_simt_tflops=round(rates["fp32_simt_tflops"] or 0.0, 1),
        fp64_tflops=_round(rates["fp64_tflops"]), fp8_tflops=_round(rates["fp8_tflops"]), fp4_tflops=None,
        int8_tops=None, l2_bytes=int(getattr(props, "L2_cache_size", 0)) or None,
        memory_bytes=int(props.total_memory), sm_count=int(props.multi_processor_count), measured=True,
        description=f"measured on {gpu}", aliases=(), reject_with=None,
        based_on=base.name if base else None, sources={"all rates": how},
    )
    if base is not None:
        return replace(base, **common)
    return HardwareSpec(**common)


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 1)
