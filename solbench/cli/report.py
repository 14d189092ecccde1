"""`solbench report`: one self-contained HTML page with the leaderboard and charts."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from solbench.cli.leaderboard import EXIT_BAD_INPUT, EXIT_CONFLICTS, EXIT_OK, add_trace_arguments, load_merged
from solbench.report.workdir import solbench_folder
from solbench.spec.errors import SpecError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help="an HTML page (no network needed) with the leaderboard, SOL scores, speedups, rooflines",
        description="Exit codes: 0 written; 1 written, but some duplicates conflict; 2 bad input.")
    add_trace_arguments(p)
    p.add_argument("-o", "--output", type=Path,
                   help="default: .solbench/report.html (a folder git ignores on its own)")
    p.add_argument("--title", default="solbench report")
    p.set_defaults(func=report_command)


def report_command(args: argparse.Namespace) -> int:
    from solbench.report.html import render_report  # pandas: kept off `solbench`'s start-up (see leaderboard)

    try:
        merged, bad, sources = load_merged(args)
        page = render_report(merged, title=args.title, sources=sources, malformed_lines=bad)
        if args.output is None:
            args.output = solbench_folder() / "report.html"
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(page)
    except (SpecError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"wrote {args.output} ({len(merged.traces)} traces)", file=sys.stderr)
    return EXIT_CONFLICTS if merged.conflicts else EXIT_OK
