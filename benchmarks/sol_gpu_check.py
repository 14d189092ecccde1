"""One-shot GPU check of solbench.sol: calibration, and bounds against real eager timings.

    python benchmarks/sol_gpu_check.py [--hw NAME] [--full] [--shared DIR] [--out DIR]

1. Detects the GPU's spec (or takes --hw) and prints it.
2. Calibrates (copy bandwidth, bf16/fp16/tf32/fp32/fp8/fp64 matmuls; --full for the large sizes) and
   prints measured / datasheet for each rate; writes the measured spec to --out (default ./sol_gpu_check).
3. For hand-built problems (GEMMs, RMSNorm, an fp32 elementwise op, causal SDPA, an fp8 matmul, a
   gather) and, when the shared data is present, a few random-input SOL-ExecBench problems: times the
   eager reference (CUDA events, L2 flushed before each rep, median of 20), prints T_SOL (strict and
   solar), the rejection bound, achieved TFLOP/s and GB/s, and checks that no legitimate eager run is
   faster than the rejection bound. Exit status 1 if one is.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from solbench.sol.analyser import analyse, sol_time_ms  # noqa: E402
from solbench.sol.capture import compile_reference  # noqa: E402
from solbench.sol.hardware import detect_spec, load_spec  # noqa: E402
from solbench.sol.reject import faster_than_light, min_possible_time_ms  # noqa: E402
from solbench.spec.definition import Definition  # noqa: E402
from solbench.spec.dtypes import torch_dtype  # noqa: E402

# One shared problem per class of issue 16's and issue 36's bound changes: their references, run on the
# GPU with the inputs `solbench run` would give them (paged indices built from the axes: the blobs are
# absent). Issue 36 changed `solar` only (strict and the rejection bound are unchanged there).
CHANGED_CLASS_PROBLEMS = (
    ("paged KV pool", "FlashInfer-Bench/012_gqa_paged_decode_h32_kv4_d128_ps1"),
    ("one-hot MoE, balanced", "L2/008_moe_sparse_routing_and_dispatch"),
    ("one-hot MoE, guard", "L2/009_decoder_layer_with_residual_connections"),
    ("one-hot MoE, known ids", "L2/013_expert_weighted_aggregation_with_shared_expert"),
    ("cu_seqlens .tolist()", "L2/018_cu_seqlens_variable_length_vision_attention"),
    ("grid .tolist()", "L1/023_multimodal_rope_position_computation_with_grid_based_indexing"),
    ("nvfp4 logical K", "Quant/008_nvfp4_multimodal_embedding_projection"),
    ("fp8 made inside", "Quant/014_fp8_yarn_rope_embedding"),
    ("bool outputs", "L1/028_hybrid_attention_mask_preparation"),
    ("fp8 no offset", "Quant/006_fp8_vision_attention_output_projection"),
)
SHARED_RANDOM_PROBLEMS = ("FlashInfer-Bench/007_gemm_n4096_k4096", "L1/069_rms_norm",
                          "L1/084_silu_activation_backward", "FlashInfer-Bench/025_rmsnorm_h4096")


def definition(inputs: dict, outputs: dict, reference: str, axes: dict) -> Definition:
    return Definition.from_dict({
        "name": "check", "axes": {k: {"type": "const", "value": v} for k, v in axes.items()},
        "inputs": {k: {"shape": s, "dtype": d} for k, (s, d) in inputs.items()},
        "outputs": {k: {"shape": s, "dtype": d} for k, (s, d) in outputs.items()}, "reference": reference})


GEMM = "import torch\ndef run(A, B):\n    return torch.matmul(A, B.T)\n"
RMS = ("import torch\ndef run(x, w):\n    xf = x.float()\n"
       "    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)\n    return w * y.to(x.dtype)\n")
ADD = "def run(a, b):\n    return a + b\n"
SDPA = ("import torch.nn.functional as F\n"
        "def run(q, k, v):\n    return F.scaled_dot_product_attention(q, k, v, is_causal=True)\n")
FP8 = ("import torch\ndef run(a, b, sa, sb):\n"
       "    return torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16)\n")
GATHER = "import torch.nn.functional as F\ndef run(table, idx):\n    return F.embedding(idx, table)\n"


def cases() -> list[tuple[str, Definition]]:
    att = ["B", "H", "L", "D"]
    return [
        ("gemm bf16 8192^3", definition({"A": (["M", "K"], "bfloat16"), "B": (["N", "K"], "bfloat16")},
                                        {"C": (["M", "N"], "bfloat16")}, GEMM, {"M": 8192, "N": 8192, "K": 8192})),
        ("gemm fp16 M=64 (memory-bound)", definition({"A": (["M", "K"], "float16"), "B": (["N", "K"], "float16")},
                                                     {"C": (["M", "N"], "float16")}, GEMM,
                                                     {"M": 64, "N": 4096, "K": 4096})),
        ("rmsnorm bf16 16384x4096", definition({"x": (["T", "H"], "bfloat16"), "w": (["H"], "bfloat16")},
                                               {"y": (["T", "H"], "bfloat16")}, RMS, {"T": 16384, "H": 4096})),
        ("add fp32 2^28", definition({"a": (["N"], "float32"), "b": (["N"], "float32")},
                                     {"c": (["N"], "float32")}, ADD, {"N": 1 << 28})),
        ("causal sdpa bf16 4x32x4096x128", definition({"q": (att, "bfloat16"), "k": (att, "bfloat16"),
                                                       "v": (att, "bfloat16")}, {"o": (att, "bfloat16")}, SDPA,
                                                      {"B": 4, "H": 32, "L": 4096, "D": 128})),
        ("fp8 scaled_mm 8192^3", definition({"a": (["M", "K"], "float8_e4m3fn"), "b": (["N", "K"], "float8_e4m3fn"),
                                             "sa": ([], "float32"), "sb": ([], "float32")},
                                            {"c": (["M", "N"], "bfloat16")}, FP8, {"M": 8192, "N": 8192, "K": 8192})),
        ("gather 64k rows of a 1M x 1024 table", definition({"table": (["V", "D"], "float32"),
                                                              "idx": (["T"], "int64")},
                                                             {"out": (["T", "D"], "float32")}, GATHER,
                                                             {"V": 1 << 20, "T": 1 << 16, "D": 1024})),
    ]


def random_inputs(d: Definition, axes: dict, scalars: dict, device: str) -> list:
    args = []
    for name, shape in d.input_shapes(axes).items():
        dtype = d.inputs[name].dtype
        if shape is None:
            args.append(scalars.get(name, 1e-6 if "eps" in name else 1.0))
        elif dtype.startswith(("int", "uint")):
            high = min(d.input_shapes(axes).get("table", (1 << 20,))[0], 1 << 20) if name == "idx" else 16
            args.append(torch.randint(0, high, shape, device=device, dtype=torch_dtype(dtype)))
        elif shape == ():
            args.append(torch.ones((), device=device, dtype=torch_dtype(dtype)))
        else:
            args.append(torch.randn(shape, device=device).to(torch_dtype(dtype)))
    return args


def time_ms(fn, l2_bytes: int, reps: int = 20) -> float:
    flush = torch.empty(max(l2_bytes, 1 << 24) * 2 // 4, device="cuda")
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        flush.zero_()  # evict what the previous rep left in L2
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def solbench_inputs(problem, workload, device: str = "cuda") -> list:
    """The inputs `solbench run` makes (custom entrypoints included); paged-KV index lists, whose
    blobs are absent offline, built from the axes: pages split evenly over the sequences."""
    from solbench.inputs.generate import make_inputs

    d, axes = problem.definition, problem.definition.resolve_axes(workload.axes)
    namespace = compile_reference(d.reference, d.name)
    entry = namespace.get(d.custom_inputs_entrypoint) if d.custom_inputs_entrypoint else None
    blobs = {n for n in d.inputs if workload.source_of(n).kind == "safetensors"}
    if blobs:
        workload = workload.__class__.from_dict({**workload.to_dict(),
                                                 "inputs": {k: v for k, v in workload.to_dict()["inputs"].items()
                                                            if k not in blobs}})
    args = make_inputs(d, workload, axes, seed=0, device=device, custom_entrypoint=entry)
    names = list(d.inputs)
    for name in blobs:
        n = d.input_shapes(axes)[name][0]
        if name.endswith("indptr"):
            total = axes["num_kv_indices"] if name.startswith("kv") else axes.get("total_q", n - 1)
            value = torch.div(torch.arange(n, device=device) * total, max(n - 1, 1), rounding_mode="floor")
        else:
            value = torch.arange(n, device=device) % axes["num_pages"]
        args[names.index(name)] = value.to(torch_dtype(d.inputs[name].dtype))
    return args


def check(name: str, d: Definition, axes: dict, scalars: dict, hw, rows: list, make_args=None) -> bool:
    strict = analyse(d, axes, scalars=scalars)
    solar = analyse(d, axes, convention="solar", scalars=scalars)
    bound, bound_solar = sol_time_ms(strict, hw), sol_time_ms(solar, hw)
    run = compile_reference(d.reference, d.name)["run"]
    resolved = d.resolve_axes(axes)
    try:
        args = make_args() if make_args else random_inputs(d, resolved, scalars, "cuda")
        with torch.no_grad():
            measured = time_ms(lambda: run(*args), hw.l2_bytes or (50 << 20))
    except Exception as exc:  # e.g. fp8 matmul on a GPU without fp8 units
        print(f"  {name}: skipped ({type(exc).__name__}: {str(exc)[:120]})")
        return True
    reject_ms = min_possible_time_ms(strict, hw)
    verdict = faster_than_light(measured, strict, hw)
    rows.append({"case": name, "measured_ms": measured, "t_sol_strict_ms": bound.t_sol_ms,
                 "t_sol_solar_ms": bound_solar.t_sol_ms, "bound": bound.binding, "reject_ms": reject_ms,
                 "sol_fraction": bound.t_sol_ms / measured, "achieved_tflops": strict.flops_total / measured / 1e9,
                 "achieved_gbps": strict.bytes_min / measured / 1e6, "method": strict.method,
                 "rejected": verdict, "strict_beaten": bound.t_sol_ms > measured})
    flag = "  <-- REJECTED (bug: legitimate eager run)" if verdict else ""
    if bound.t_sol_ms > measured:
        flag += "  <-- strict T_SOL above the eager time (not a lower bound)"
    print(f"  {name:42s} eager {measured:9.4f} ms  T_SOL strict {bound.t_sol_ms:9.4f} ({bound.binding:6s}) "
          f"solar {bound_solar.t_sol_ms:9.4f}  reject<{reject_ms:9.4f}  SOL/eager {bound.t_sol_ms / measured:5.2f}"
          f"{flag}")
    return verdict is None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hw", help="spec to use instead of the detected one")
    parser.add_argument("--full", action="store_true", help="full-size calibration (slower)")
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "sol-execbench")
    parser.add_argument("--out", type=Path, default=Path("sol_gpu_check"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    hw = load_spec(args.hw) if args.hw else detect_spec()
    print(f"GPU: {torch.cuda.get_device_name()}  spec: {hw.name} (HBM {hw.hbm_bandwidth_gbps} GB/s, "
          f"bf16 {hw.bf16_tflops} TFLOP/s, L2 {hw.l2_bytes} B)")

    from solbench.sol.calibrate import measure

    measured = measure(quick=not args.full)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{measured.name.lower()}.json").write_text(json.dumps(measured.to_dict(), indent=2) + "\n")
    print("calibration (measured / datasheet):")
    for key in ("hbm_bandwidth_gbps", "bf16_tflops", "fp16_tflops", "tf32_tflops", "fp32_simt_tflops",
                "fp8_tflops", "fp64_tflops"):
        got, sheet = getattr(measured, key), getattr(hw, key)
        ratio = f"{got / sheet:.2f}" if got and sheet else "-"
        print(f"  {key:20s} {got!s:>10} / {sheet!s:>10}  = {ratio}")

    rows: list = []
    ok = True
    print("hand-built problems:")
    for name, d in cases():
        ok &= check(name, d, {}, {}, hw, rows)
    if args.shared.is_dir():
        from solbench.spec.problem import load_problem

        print("shared problems (first 3 workloads each):")
        for rel in SHARED_RANDOM_PROBLEMS:
            path = args.shared / rel
            if not path.is_dir():
                continue
            problem = load_problem(path)
            for w in problem.workloads[:3]:
                ok &= check(f"{problem.name[:28]} {w.uuid[:8]}", problem.definition, w.axes, w.scalar_values(),
                            hw, rows)
        print("changed classes, issues 16 and 36 (smallest and middle workload of each):")
        for label, rel in CHANGED_CLASS_PROBLEMS:
            path = args.shared / rel
            if not path.is_dir():
                continue
            problem = load_problem(path)
            by_size = sorted(problem.workloads, key=lambda w: math.prod(max(int(v), 1) for v in w.axes.values()))
            for w in {id(x): x for x in (by_size[0], by_size[len(by_size) // 2])}.values():
                ok &= check(f"{label[:20]} {problem.name[:14]} {w.uuid[:6]}", problem.definition, w.axes,
                            w.scalar_values(), hw, rows, make_args=lambda p=problem, w=w: solbench_inputs(p, w))
    beaten = sum(1 for r in rows if r.get("strict_beaten"))
    rejected = sum(1 for r in rows if r.get("rejected"))
    print(f"{len(rows)} cases: {rejected} faster-than-light rejections (expected 0), "
          f"{beaten} eager runs faster than the strict T_SOL (expected 0)")
    (args.out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(f"results in {args.out}/results.json; "
          + ("no legitimate run was rejected" if ok else "A LEGITIMATE RUN WAS REJECTED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
