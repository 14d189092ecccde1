"""`solbench hw list|show NAME|detect|calibrate`: the hardware specs speed-of-light bounds use."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from solbench.report.table import fitted, output_console, rows_table
from solbench.sol.hardware import REPO_SPECS_DIR, HardwareSpec, detect_spec, list_specs, load_spec, spec_path
from solbench.spec.errors import SpecError

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def register(subparsers) -> None:
    p = subparsers.add_parser("hw", help="list, show, detect or measure GPU hardware specs")
    sub = p.add_subparsers(dest="hw_command", metavar="ACTION")
    p_list = sub.add_parser("list", help="all known specs")
    p_list.add_argument("--json", action="store_true")
    p_show = sub.add_parser("show", help="one spec with the source of every number")
    p_show.add_argument("name")
    p_show.add_argument("--json", action="store_true")
    p_detect = sub.add_parser("detect", help="the spec of the running GPU")
    p_detect.add_argument("--device", type=int, default=0)
    p_cal = sub.add_parser("calibrate", help="measure copy bandwidth and matmul rates here (needs a GPU)")
    p_cal.add_argument("--device", type=int, default=0)
    p_cal.add_argument("--name", help="name of the measured spec (default: <GPU>_MEASURED)")
    p_cal.add_argument("-o", "--output", type=Path, help="where to write the spec JSON "
                                                         "(default: hw_specs/<name>.json)")
    p_cal.add_argument("--quick", action="store_true", help="smaller sizes, fewer reps")
    p.set_defaults(func=hw_command)


def hw_command(args) -> int:
    console = output_console()
    err = Console(stderr=True, soft_wrap=True)  # lines never broken at 80 columns in a log
    try:
        if args.hw_command == "list":
            return _list(console, args.json)
        if args.hw_command == "show":
            return _show(console, load_spec(args.name), args.json)
        if args.hw_command == "detect":
            return _show(console, detect_spec(args.device), False)
        if args.hw_command == "calibrate":
            return _calibrate(console, args)
    except SpecError as exc:
        err.print(f"[red]error:[/red] {exc}")
        return EXIT_BAD_INPUT
    err.print("usage: solbench hw list|show NAME|detect|calibrate")
    return EXIT_BAD_INPUT


def _fmt(x) -> str:
    return "-" if x in (None, 0) else f"{x:g}"


HW_DROP_ORDER = ("kind", "fp64", "tf32", "fp32 simt", "L2 MiB", "SMs", "fp4", "fp8")


def specs_table(specs: list[HardwareSpec], leave_out: frozenset[str] = frozenset()) -> Table:
    """One row per hardware spec; the columns in `leave_out` are not shown (`fitted` picks them)."""
    rows = []
    for s in specs:
        rows.append({"name": s.name, "bf16": _fmt(s.bf16_tflops), "fp8": _fmt(s.fp8_tflops), "fp4": _fmt(s.fp4_tflops),
                     "tf32": _fmt(s.tf32_tflops), "fp32 simt": _fmt(s.fp32_simt_tflops), "fp64": _fmt(s.fp64_tflops),
                     "HBM GB/s": _fmt(s.hbm_bandwidth_gbps),
                     "L2 MiB": _fmt(round(s.l2_bytes / 2**20, 1) if s.l2_bytes else None), "SMs": _fmt(s.sm_count),
                     "kind": "measured" if s.measured else ("locked clocks" if s.clocks_locked else "datasheet")})
    return rows_table("hardware specs (dense TFLOP/s, GB/s)", rows, ("name", "bf16", "fp8", "fp4", "tf32",
                      "fp32 simt", "fp64", "HBM GB/s", "L2 MiB", "SMs", "kind"), ("name", "kind"), leave_out)


def _list(console: Console, as_json: bool) -> int:
    specs = list_specs()
    if as_json:
        for spec in specs:
            print(json.dumps(spec.to_dict()))
        return EXIT_OK
    console.print(fitted(console, lambda leave_out: specs_table(specs, leave_out), HW_DROP_ORDER))
    return EXIT_OK


def _show(console: Console, spec: HardwareSpec, as_json: bool) -> int:
    if as_json:
        print(json.dumps(spec.to_dict(), indent=2))
        return EXIT_OK
    table = Table(title=f"{spec.name}: {spec.description}", show_header=False)
    table.add_column("field")
    table.add_column("value")
    for key, value in spec.to_dict().items():
        if key in ("sources", "description"):
            continue
        table.add_row(key, "-" if value is None else str(value))
    for key, value in spec.sources.items():
        table.add_row(f"source: {key}", value)
    try:
        table.add_row("file", str(spec_path(spec.name)))
    except SpecError:
        pass
    console.print(table)
    return EXIT_OK


def _calibrate(console: Console, args) -> int:
    try:
        import torch
    except ImportError:
        print("calibrate needs torch with CUDA", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not torch.cuda.is_available():
        print("error: calibrate needs a CUDA GPU and none is visible", file=sys.stderr)
        return EXIT_BAD_INPUT
    from solbench.sol.calibrate import measure

    spec = measure(args.device, args.name, quick=args.quick)
    out = args.output or (REPO_SPECS_DIR if REPO_SPECS_DIR.is_dir() else Path("hw_specs")) / \
        f"{spec.name.lower()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(spec.to_dict(), indent=2) + "\n")
    _show(console, spec, False)
    console.print(f"wrote {out}")
    return EXIT_OK
