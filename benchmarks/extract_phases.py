"""Where one model's extraction time goes: build, recording, export, codegen, CPU validation, per block.

    python benchmarks/extract_phases.py --model stable-diffusion-v1-5/stable-diffusion-v1-5 [--top 25]
    python benchmarks/extract_phases.py --model Qwen/Qwen3-Next-80B-A3B-Instruct --profile 30

Wraps the pipeline's steps with timers (wall and this process's CPU) and prints the total per phase, then
the slowest blocks with their export and validation seconds. `--profile N` also runs cProfile and prints
the N functions with the most cumulative time. Offline: shipped configs only.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import os
import pstats
import signal
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (module, attribute, phase): the steps of extract_model, as the pipeline calls them
STEPS = (
    ("solbench.extract.trace", "trace", "trace (templates: build on meta)"),
    ("solbench.extract.pipeline", "trace", "trace (templates: build on meta)"),
    ("solbench.extract.pipeline", "drafts_for", "templates: drafts"),
    ("solbench.extract.validate", "Validator.validate_all", "templates: CPU validation"),
    ("solbench.extract.build", "build_transformers", "build on meta (generic)"),
    ("solbench.extract.build_diffusers", "build_diffusers", "build on meta (diffusers)"),
    ("solbench.extract.capture", "record_calls", "record calls (meta or fake tensors)"),
    ("solbench.extract.partition", "blocks", "partition"),
    ("solbench.extract.block_export", "export_block", "torch.export"),
    ("solbench.extract.codegen", "generate", "codegen"),
    ("solbench.extract.generic", "make_draft", "draft"),
    ("solbench.extract.generic_check", "check", "CPU validation (generic)"),
    ("solbench.extract.generic_check", "cpu_copy", "  of which: CPU copy of the block"),
    ("solbench.extract.backward", "grad_flags", "backward: gradient flags (fake forward)"),
    ("solbench.extract.backward", "backward_draft", "backward: joint-graph trace"),
    ("solbench.extract.backward_check", "check", "backward: CPU validation"),
)


class Timers:
    def __init__(self) -> None:
        self.phase: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
        self.blocks: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))

    def wrap(self, fn, phase: str):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            w, c = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                entry = self.phase[phase]
                entry[0] += time.perf_counter() - w
                entry[1] += time.process_time() - c
                entry[2] += 1
                label = _block_label(phase, args)
                if label:
                    self.blocks[label][phase] += time.perf_counter() - w
        return timed


def _block_label(phase: str, args: tuple) -> str:
    """The block a per-block step worked on (export: its module's class; check: the draft's name)."""
    if phase == "torch.export" and args:
        return type(args[0]).__name__
    if phase.startswith("CPU validation (generic)") and len(args) > 1:
        return args[1].class_name
    return ""


def install(timers: Timers) -> None:
    import importlib

    for module_name, attribute, phase in STEPS:
        module = importlib.import_module(module_name)
        owner_name, _, name = attribute.rpartition(".")
        owner = getattr(module, owner_name) if owner_name else module
        if hasattr(owner, name):
            setattr(owner, name, timers.wrap(getattr(owner, name), phase))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--no-validate", action="store_true")
    parser.add_argument("--backward", action="store_true", help="also the generic backward problems")
    parser.add_argument("--top", type=int, default=20, help="slowest blocks to list")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="also cProfile: top N functions")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch  # noqa: F401 - imported before timing so that import cost is not a phase

    from solbench.extract.pipeline import extract_model

    timers = Timers()
    install(timers)
    signal.signal(signal.SIGTERM, lambda *_: (_print_phases(timers, "interrupted: "), sys.exit(1)))
    profiler = cProfile.Profile() if args.profile else None
    load = os.getloadavg()[0]
    w, c = time.perf_counter(), time.process_time()
    if profiler:
        profiler.enable()
    result = extract_model(args.model, validate=not args.no_validate, use_hub=False, backward=args.backward)
    if profiler:
        profiler.disable()
    wall, cpu = time.perf_counter() - w, time.process_time() - c
    failed = len(result.failed)
    print(f"{args.model}: {len(result.drafts)} problems, {len(result.validations) - failed} validated, "
          f"{failed} failed; wall {wall:.1f} s, CPU {cpu:.1f} s; load {load:.1f} -> {os.getloadavg()[0]:.1f}")
    _print_phases(timers, "", args.top)
    for line in result.skipped:
        print(f"  skipped {line[:160]}")
    if profiler:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(args.profile)
        print(out.getvalue())
    return 0


def _print_phases(timers: Timers, title: str, top: int = 20) -> None:
    """The time per phase (slowest first), then the slowest blocks; also on SIGTERM (a `timeout`)."""
    print(f"{title}process CPU {time.process_time():.1f} s; load {os.getloadavg()[0]:.1f}")
    print(f"{'phase':40s} {'calls':>5s} {'wall s':>8s} {'cpu s':>8s}")
    for phase, (pw, pc, n) in sorted(timers.phase.items(), key=lambda kv: -kv[1][0]):
        print(f"{phase:40s} {n:5d} {pw:8.1f} {pc:8.1f}")
    rows = sorted(timers.blocks.items(), key=lambda kv: -sum(kv[1].values()))[:top]
    print(f"\n{'block':45s} {'export s':>9s} {'check s':>9s}")
    for label, phases in rows:
        print(f"{label:45s} {phases.get('torch.export', 0):9.1f} {phases.get('CPU validation (generic)', 0):9.1f}",
              flush=True)


if __name__ == "__main__":
    sys.exit(main())
