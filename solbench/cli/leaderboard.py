"""`solbench leaderboard`: merge trace files into the leaderboard table (CSV, Markdown or JSON)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from solbench.report.merge import MergeResult, load_sourced, merge
from solbench.spec.errors import SpecError

EXIT_OK, EXIT_CONFLICTS, EXIT_BAD_INPUT = 0, 1, 2


def add_trace_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("traces", nargs="+", type=Path, help="trace files (JSON Lines) or folders of *.jsonl")
    p.add_argument("--skip-malformed", action="store_true",
                   help="skip unreadable trace lines instead of refusing the input (they are still counted)")


def load_merged(args: argparse.Namespace) -> tuple[MergeResult, int, list[str]]:
    """Read and merge the traces; report malformed lines and duplicates on stderr.

    Raises SpecError for input that must not be used as is (missing file, unreadable lines).
    """
    loaded = load_sourced(args.traces)
    bad = sum(len(v) for v in loaded.malformed.values())
    if bad:
        where = "; ".join(f"{f}: line(s) {', '.join(map(str, lines[:10]))}{' ...' if len(lines) > 10 else ''}"
                          for f, lines in loaded.malformed.items())
        if not args.skip_malformed:
            raise SpecError(f"{bad} malformed trace line(s) ({where}); fix them or pass --skip-malformed")
        print(f"warning: skipped {bad} malformed trace line(s) ({where})", file=sys.stderr)
    if not loaded.traces:
        raise SpecError("no traces in " + ", ".join(map(str, args.traces)))
    merged = merge(loaded.traces)
    if merged.superseded or merged.skipped_duplicates:
        print(f"merged duplicates: {merged.superseded} older result(s) superseded by a newer one with the same "
              f"status, {merged.skipped_duplicates} SKIPPED result(s) replaced by a real one", file=sys.stderr)
    for conflict in merged.conflicts:
        print(f"conflict: {conflict.describe()}", file=sys.stderr)
    if merged.conflicts:
        print(f"{len(merged.conflicts)} conflicting workload(s) left out of the figures "
              f"(counted in the 'conflicts' column)", file=sys.stderr)
    sources = sorted({s.source.rsplit(":", 1)[0] for s in loaded.traces})
    return merged, bad, sources


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "leaderboard", help="merge traces into a leaderboard (one row per solution, problem and hardware)",
        description="Exit codes: 0 written; 1 written, but some duplicates conflict (listed on stderr); "
                    "2 bad input (missing file, malformed trace lines, no traces).")
    add_trace_arguments(p)
    p.add_argument("-o", "--output", type=Path,
                   help="write here (default: stdout); an existing CSV is merged into: rows of the same solution, "
                        "problem and hardware are replaced, all others kept")
    p.add_argument("--replace", action="store_true",
                   help="overwrite an existing output file as a whole instead of merging into it")
    p.add_argument("--format", help="csv, md or json (default: from the output suffix, else csv)")
    p.set_defaults(func=leaderboard_command)


def leaderboard_command(args: argparse.Namespace) -> int:
    # pandas: imported when the command runs, not when `solbench` starts (--version, --help, other commands)
    from solbench.report.leaderboard import format_for, leaderboard, render

    try:
        merged, _, _ = load_merged(args)
        fmt = format_for(args.output, args.format)
        frame = leaderboard(merged)
        if args.output and args.output.exists() and not args.replace:
            frame, said = _merged_into(args.output, frame, fmt)
        else:
            said = f"wrote {args.output}" + (" (replaced the file)" if args.output and args.output.exists() else "")
        if args.output:
            args.output.parent.mkdir(parents=True, exist_ok=True)
            args.output.write_text(render(frame, fmt))
            print(said, file=sys.stderr)
        else:
            sys.stdout.write(render(frame, fmt))
    except (SpecError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return EXIT_CONFLICTS if merged.conflicts else EXIT_OK


def _merged_into(path: Path, frame, fmt: str):
    """The new rows merged into the leaderboard CSV at `path` (see report/leaderboard_update.py)."""
    from solbench.report.leaderboard import read_leaderboard
    from solbench.report.leaderboard_update import merge_leaderboards

    if fmt != "csv":
        raise SpecError(f"{path} exists and only a CSV leaderboard can be merged into; pass --replace to "
                        f"overwrite it, or write to a new file")
    update = merge_leaderboards(read_leaderboard(path), frame)
    return update.frame, update.describe(str(path))
