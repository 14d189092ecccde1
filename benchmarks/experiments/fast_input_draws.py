"""A 2x faster input draw, and why the harness does not use it: with it, verdicts took longer and long
calls measured 1-4% slower.

    python benchmarks/experiments/fast_input_draws.py speed          # torch's normal_ against this kernel
    python benchmarks/experiments/fast_input_draws.py power [--rounds 3]

Every timed call gets fresh inputs (`worker/timed_block.py`); with gigabytes of weights the draw is
most of what the harness adds to a call. torch's `normal_` spends one Philox evaluation per four values
whatever the dtype: on an H100 it writes bfloat16 at ~900 GB/s (L2/004's 5.2 GB of weights: 5.8 ms per
call). The kernel below (Philox4x32-10, eight 16-bit uniforms per evaluation for 2-byte dtypes, four
24-bit ones for float32, Box-Muller, 16-byte stores; compiled with NVRTC and launched through the
driver) writes bfloat16 and float16 at ~1850 GB/s (2.06x) and float32 at ~2650 GB/s (1.46x) on an H100;
on an H100 its values matched a plain-Python model of the same algorithm (itself checked against
Random123's known answers), and their moments a standard normal's; those tests went with the change.

Wired into the harness's draws (every worker alike, tensors of 32 Mi values or more) and measured on one
H100, issue 15's ten problems and then L2/004 and L2/005 alone (4 workloads each), alternating with the
code without it, same machine (2026-11-26):

| run | wall (s) | timed GPU s | harness s beyond them | latencies (004/005) |
|---|---|---|---|---|
| 10 problems, without / with / with | 113.3 / 125.7 / 126.3 | 41.4 / 56.8 / 55.3 | 67.0 / 62.8 / 65.9 | |
| 004+005, without, with, without, with | 67.9, 75.5, 74.2, 75.5 | 31.4, 40.6, 35.3, 41.2 | 32.0, 30.4, 33.3, 29.6 | +1-4% with |

The harness's own seconds fell (1-4 s per run; a 2.1 ms call's workload 3.3 -> 2.3 s), but every one of
the eight workloads measured 1-4% slower with the fast draw in both alternations (L2/004's 7.3 ms call:
7.29-7.32 ms without, 7.51-7.52 ms with), and the compute-bound ones needed more samples to reach the
CI target (the timed GPU seconds grew by 6-15 s), so the runs took longer. The likely cause, not
proven: those calls run at the power limit (the SM clock read 1290-1605 MHz after a block of 60 ms
GEMMs), and a shorter draw leaves less low-power time between calls. `power` below alternates blocks of
a compute-bound and a memory-bound call with either draw in one process; there the GEMM's median drifted
by up to 3% from block to block with both draws, which hides a 1-4% difference. The harness keeps
torch's draw; this file keeps the kernel and the experiment so the question can be asked again.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from solbench.inputs.seeds import make_generator  # noqa: E402
from solbench.timing import timer  # noqa: E402
from solbench.timing.config import TimingConfig  # noqa: E402

MIN_ELEMENTS = 1 << 25  # the size the harness would have drawn this way from
THREADS = 256
_KIND = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}
_PER_COUNTER = {0: 8, 1: 8, 2: 4}  # values one Philox evaluation gives
_STREAM_TAG = 0x536F6C62  # Philox counter word 3: these draws never share counters with torch's

_SOURCE = r"""
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

__device__ __forceinline__ void philox10(unsigned int c[4], unsigned int k0, unsigned int k1) {
    #pragma unroll
    for (int r = 0; r < 10; ++r) {
        unsigned int hi0 = __umulhi(PHILOX_M0, c[0]), lo0 = PHILOX_M0 * c[0];
        unsigned int hi1 = __umulhi(PHILOX_M1, c[2]), lo1 = PHILOX_M1 * c[2];
        unsigned int n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0; c[1] = lo1; c[2] = n2; c[3] = lo0;
        k0 += PHILOX_W0; k1 += PHILOX_W1;
    }
}

// Box-Muller on a (0, 1] radius uniform and a [-pi, pi) angle.
__device__ __forceinline__ void box_muller(float u, float angle, float mean, float stdev, float* x, float* y) {
    float r = sqrtf(-2.0f * __logf(u)) * stdev;
    float s, c;
    __sincosf(angle, &s, &c);
    *x = fmaf(r, c, mean);
    *y = fmaf(r, s, mean);
}

// Two floats rounded to nearest even and packed (x in the low half).
__device__ __forceinline__ unsigned int pack_bf16(float x, float y) {
#if __CUDA_ARCH__ >= 800
    unsigned int packed;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(y), "f"(x));
    return packed;
#else
    unsigned int a = __float_as_uint(x), b = __float_as_uint(y);
    a = (a + 0x7FFFu + ((a >> 16) & 1u)) >> 16;
    b = (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;
    return a | (b << 16);
#endif
}

__device__ __forceinline__ unsigned int pack_f16(float x, float y) {
    unsigned short a, b;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(a) : "f"(x));
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(b) : "f"(y));
    return a | ((unsigned int)b << 16);
}

extern "C" __global__ void solbench_fast_normal(void* out, unsigned long long n, unsigned long long key,
                                                unsigned long long base, unsigned int tag, unsigned int kind,
                                                float mean, float stdev) {
    const unsigned int per = kind == 2 ? 4u : 8u;
    const unsigned long long groups = (n + per - 1) / per;
    const float two_pi = 6.283185307179586f, pi = 3.141592653589793f;
    const bool aligned = (((unsigned long long)out) & 15ull) == 0;
    for (unsigned long long g = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; g < groups;
         g += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long ctr = base + g;
        unsigned int c[4] = {(unsigned int)ctr, (unsigned int)(ctr >> 32), 0u, (unsigned int)tag};
        philox10(c, (unsigned int)key, (unsigned int)(key >> 32));
        const unsigned long long first = g * per;
        if (kind == 2) {
            float v[4];
            #pragma unroll
            for (int j = 0; j < 2; ++j) {
                float u = (float)((c[2 * j] >> 8) + 1u) * 5.9604644775390625e-08f;             // (0, 1]
                float a = ((float)(c[2 * j + 1] >> 8) + 0.5f) * 5.9604644775390625e-08f * two_pi - pi;
                box_muller(u, a, mean, stdev, &v[2 * j], &v[2 * j + 1]);
            }
            float* o = (float*)out;
            if (aligned && first + 4 <= n) {
                *(float4*)(o + first) = make_float4(v[0], v[1], v[2], v[3]);
            } else {
                for (int j = 0; j < 4 && first + j < n; ++j) o[first + j] = v[j];
            }
        } else {
            unsigned int h[4];  // packed pairs
            #pragma unroll
            for (int j = 0; j < 4; ++j) {
                float u = (float)((c[j] & 0xFFFFu) + 1u) * 1.52587890625e-05f;                  // (0, 1]
                float a = ((float)(c[j] >> 16) + 0.5f) * 1.52587890625e-05f * two_pi - pi;
                float x, y;
                box_muller(u, a, mean, stdev, &x, &y);
                h[j] = kind == 0 ? pack_bf16(x, y) : pack_f16(x, y);
            }
            unsigned short* o = (unsigned short*)out;
            if (aligned && first + 8 <= n) {
                *(uint4*)(o + first) = make_uint4(h[0], h[1], h[2], h[3]);
            } else {
                for (int j = 0; j < 8 && first + j < n; ++j) o[first + j] = (unsigned short)(h[j / 2] >> (16 * (j % 2)));
            }
        }
    }
}
"""

_lock = threading.Lock()
_kernels: dict[int, tuple[object, int]] = {}  # device index -> (the compiled kernel, blocks per launch)
_driver: list = []  # libcuda's cuModuleLoadData, cuModuleGetFunction, cuLaunchKernel (bound with the first kernel)


def _nvrtc() -> ctypes.CDLL:
    major = str(torch.version.cuda).split(".")[0]
    for name in (f"libnvrtc.so.{major}", "libnvrtc.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise RuntimeError("NVRTC (libnvrtc) was not found beside this CUDA build of torch")


def compile_cubin(arch: str) -> bytes:
    """The kernel built for `sm_{arch}` (e.g. "90"). NVRTC alone: no headers, no torch.utils.cpp_extension
    (whose import made torch's own `_compile_kernel` take 0.4-0.6 s per process)."""
    nvrtc = _nvrtc()
    program = ctypes.c_void_p()
    if nvrtc.nvrtcCreateProgram(ctypes.byref(program), _SOURCE.encode(), b"solbench_fast_normal.cu", 0, None, None):
        raise RuntimeError("NVRTC could not create the program")
    try:
        options = (ctypes.c_char_p * 1)(f"--gpu-architecture=sm_{arch}".encode())
        if nvrtc.nvrtcCompileProgram(program, 1, options):
            size = ctypes.c_size_t()
            nvrtc.nvrtcGetProgramLogSize(program, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            nvrtc.nvrtcGetProgramLog(program, log)
            raise RuntimeError(f"NVRTC could not compile the input-draw kernel:\n{log.value.decode(errors='replace')}")
        size = ctypes.c_size_t()
        nvrtc.nvrtcGetCUBINSize(program, ctypes.byref(size))
        cubin = ctypes.create_string_buffer(size.value)
        nvrtc.nvrtcGetCUBIN(program, cubin)
        return cubin.raw
    finally:
        nvrtc.nvrtcDestroyProgram(ctypes.byref(program))


def _kernel(index: int) -> tuple[ctypes.c_void_p, int]:
    found = _kernels.get(index)
    if found is None:
        with _lock, torch.cuda.device(index):
            found = _kernels.get(index)
            if found is None:
                props = torch.cuda.get_device_properties(index)
                cubin = compile_cubin(f"{props.major}{props.minor}")
                if not _driver:
                    libcuda = ctypes.CDLL("libcuda.so.1")
                    _driver.extend([libcuda.cuModuleLoadData, libcuda.cuModuleGetFunction, libcuda.cuLaunchKernel])
                torch.cuda.current_stream(index).synchronize()  # the device's primary context is current here
                module, function = ctypes.c_void_p(), ctypes.c_void_p()
                status = _driver[0](ctypes.byref(module), cubin) or _driver[1](
                    ctypes.byref(function), module, b"solbench_fast_normal")
                if status:
                    raise RuntimeError(f"the input-draw kernel could not be loaded (CUDA error {status})")
                # grid-stride: every SM busy, blocks reused
                found = _kernels[index] = (function, props.multi_processor_count * 8)
    return found


def fill_normal_(out: torch.Tensor, generator: torch.Generator, mean: float = 0.0, std: float = 1.0) -> None:
    """Write N(mean, std) values into `out` (contiguous, CUDA, bfloat16/float16/float32) on the current
    stream, from `generator`'s seed at its current offset; the generator's offset moves past the counters used, as a torch draw's does."""
    kind = _KIND[out.dtype]
    n = out.numel()
    groups = -(-n // _PER_COUNTER[kind])
    base = generator.get_offset()
    index = out.device.index if out.device.index is not None else torch.cuda.current_device()
    function, max_blocks = _kernel(index)
    values = (ctypes.c_void_p(out.data_ptr()), ctypes.c_uint64(n), ctypes.c_uint64(generator.initial_seed()),
              ctypes.c_uint64(base), ctypes.c_uint32(_STREAM_TAG), ctypes.c_uint32(kind),
              ctypes.c_float(mean), ctypes.c_float(std))
    params = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
    blocks = max(1, min(max_blocks, -(-groups // THREADS)))
    stream = torch.cuda.current_stream(index).cuda_stream
    status = _driver[2](function, blocks, 1, 1, THREADS, 1, 1, 0, ctypes.c_void_p(stream), params, None)
    if status != 0:
        raise RuntimeError(f"cuLaunchKernel failed for the input draw (CUDA error {status})")
    generator.set_offset(base + -(-groups // 4) * 4)  # torch's CUDA offsets move in steps of 4


def device_ms(fn, reps: int = 10) -> float:
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps


def speed(sizes_gb: list[float]) -> None:
    t0 = time.perf_counter()
    first = torch.empty(MIN_ELEMENTS, dtype=torch.bfloat16, device="cuda")
    fill_normal_(first, make_generator(1, "cuda"))
    torch.cuda.synchronize()
    print(f"first fast draw in this process (NVRTC compile + module load): {time.perf_counter() - t0:.3f} s")
    g = make_generator(2, "cuda")
    host = []
    for _ in range(200):
        t = time.perf_counter()
        fill_normal_(first, g)
        host.append(time.perf_counter() - t)
    torch.cuda.synchronize()
    print(f"host time per fast draw (launch): median {sorted(host)[100] * 1e6:.1f} us")
    print(f"{'dtype':10s} {'GB':>5s} {'torch ms':>9s} {'GB/s':>6s} {'fast ms':>8s} {'GB/s':>6s} {'speed-up':>8s}")
    for gb in sizes_gb:
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            out = torch.empty(int(gb * 1e9) // torch.tensor([], dtype=dtype).element_size(), dtype=dtype, device="cuda")
            nbytes = out.numel() * out.element_size()
            ms_torch = device_ms(lambda out=out: out.normal_(generator=g))
            ms_fast = device_ms(lambda out=out: fill_normal_(out, g))
            print(f"{str(dtype)[6:]:10s} {nbytes / 1e9:5.2f} {ms_torch:9.3f} {nbytes / ms_torch / 1e6:6.0f} "
                  f"{ms_fast:8.3f} {nbytes / ms_fast / 1e6:6.0f} {ms_torch / ms_fast:7.2f}x")
            del out


def power(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="power")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=16384)
    parser.add_argument("--inter", type=int, default=53248)
    args = parser.parse_args(argv)
    h, f = args.hidden, args.inter
    w_gate = torch.empty(f, h, dtype=torch.bfloat16, device="cuda")
    w_down = torch.empty(h, f, dtype=torch.bfloat16, device="cuda")
    calls = {"gemm_8192_tokens": torch.empty(8192, h, dtype=torch.bfloat16, device="cuda"),
             "gemv_16_tokens": torch.empty(16, h, dtype=torch.bfloat16, device="cuda")}
    generator = make_generator(1, "cuda")
    draws = {
        "torch": lambda t: t.normal_(generator=generator),
        "fast": lambda t: fill_normal_(t, generator),
    }
    print(f"{'call':18s} {'draw':6s} {'round':>5s} {'median ms':>10s} {'ci %':>6s} {'n':>4s} {'stop':10s} {'sm MHz after':>12s}")
    for name, x in calls.items():
        def run(i, x=x):
            return torch.nn.functional.silu(x @ w_gate.T) @ w_down.T
        for round_ in range(args.rounds):
            for draw_name, draw in draws.items():
                def prepare(i, draw=draw, x=x):
                    for t in (x, w_gate, w_down):
                        draw(t)
                result = timer.time_iterations(run, prepare, "cuda", TimingConfig.cuda())
                clock = (result.clocks_after or {}).get("sm_mhz")
                stats = result.stats
                rel = stats.rel_ci_halfwidth
                print(f"{name:18s} {draw_name:6s} {round_:5d} {stats.median_ms:10.3f} {100 * (rel or 0):6.2f} "
                      f"{len(result.samples_ms):4d} {result.stop_reason:10s} {clock!s:>12s}")




def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    mode, rest = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("speed", [])
    if mode == "speed":
        speed([0.07, 1.0, 5.2])
    elif mode == "power":
        power(rest)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
