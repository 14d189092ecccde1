"""`solbench pull`: download a published problem set (HuggingFace dataset) into problem folders."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "pull", help="download a published problem set (e.g. nvidia/SOL-ExecBench) into problem folders",
        description="Download a HuggingFace dataset of problems (one parquet per subset) and write "
                    "<output>/<subset>/<problem>/definition.json + workload.jsonl.")
    parser.add_argument("dataset", nargs="?", default="nvidia/SOL-ExecBench", help="dataset repo id")
    parser.add_argument("-o", "--output", type=Path, default=Path("problem_defs/sol-execbench"),
                        help="where to write the subsets (default: problem_defs/sol-execbench)")
    parser.add_argument("--subset", action="append", default=[], metavar="NAME",
                        help="only these subsets (repeatable): L1, L2, Quant, FlashInfer-Bench")
    parser.add_argument("--from-parquet", nargs="+", type=Path, metavar="FILE",
                        help="convert local parquet files instead of downloading (subset from each path)")
    parser.set_defaults(func=handle)
    return parser


def handle(args: argparse.Namespace) -> int:
    from rich.console import Console

    from solbench.extract import hub, pull
    from solbench.spec.errors import SpecError

    console = Console(stderr=True, soft_wrap=True)  # lines never broken at 80 columns in a log
    try:
        if args.from_parquet:
            missing = [str(p) for p in args.from_parquet if not p.is_file()]
            if missing:
                raise SpecError(f"no such parquet file: {', '.join(missing)}")
            files: dict[str, list[Path]] = {}
            for path in args.from_parquet:
                files.setdefault(pull.subset_of(str(path)), []).append(path)
            if args.subset:
                files = {s: p for s, p in files.items() if s in args.subset}
        else:
            reach = hub.reach()
            if not reach.online:
                console.print(f"offline: looking for {args.dataset} in the local HuggingFace cache only "
                              f"[dim]({reach.reason})[/dim]")
            with console.status(f"downloading {args.dataset} ..."):
                files = pull.download(args.dataset, args.subset or None, local_only=not reach.online)
        result = pull.convert(files, args.output)
    except SpecError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2
    for subset, folders in result.written.items():
        console.print(f"[green]ok[/green] {subset}: {len(folders)} problems -> {args.output / subset}")
    return 0
