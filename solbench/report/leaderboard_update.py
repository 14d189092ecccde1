"""Writing a leaderboard into a file that already holds one: rows merge, they are never lost silently.

The shipped `leaderboard/leaderboard.csv` holds GPU-measured rows that the CI gate reads as its speed
baseline. A user who points `-o` at it after a CPU run must not replace those rows with two CPU rows:
new rows replace only the rows of the same (solution, problem, hardware), everything else is kept, and
the command says what changed. Only `--replace` overwrites the file as a whole.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from solbench.report.leaderboard import (
    COLUMN_NAMES,
    LEVEL_PROBLEM,
    LEVEL_SOLUTION,
    solution_row,
)

ROW_KEY = ("solution", "problem", "hardware")
_INT_COLUMNS = ("problems", "workloads", "passed", "failed", "skipped", "conflicts", "numerics_flagged")


@dataclass
class LeaderboardUpdate:
    """What merging new rows into an existing leaderboard did, in rows (summary rows not counted)."""

    frame: pd.DataFrame
    added: list[tuple[str, str, str]] = field(default_factory=list)
    replaced: list[tuple[str, str, str]] = field(default_factory=list)
    kept: int = 0

    def describe(self, path: str) -> str:
        return (f"{path}: {len(self.added)} row(s) added, {len(self.replaced)} replaced, {self.kept} kept "
                f"(rows of other solutions, problems or hardware are never touched; --replace overwrites the file)")


def _key(row: dict) -> tuple[str, str, str]:
    return tuple(str(row[k]) for k in ROW_KEY)  # type: ignore[return-value]


def _records(frame: pd.DataFrame) -> list[dict]:
    rows = []
    for record in frame.reindex(columns=list(COLUMN_NAMES)).to_dict(orient="records"):
        rows.append({k: (math.nan if v is None or (isinstance(v, float) and math.isnan(v)) else v)
                     for k, v in record.items()})
    return rows


def merge_leaderboards(existing: pd.DataFrame, new: pd.DataFrame) -> LeaderboardUpdate:
    """`existing` with `new`'s problem rows put in place of the rows they measure again.

    Summary rows are recomputed for each (solution, hardware) that gained or changed a problem row, from
    all of that pair's problem rows, old and new; the summaries of untouched pairs are kept verbatim."""
    old_rows, new_rows = _records(existing), _records(new)
    new_problems = {_key(r): r for r in new_rows if r["level"] == LEVEL_PROBLEM}
    update = LeaderboardUpdate(frame=existing)
    merged: list[dict] = []
    for row in old_rows:
        if row["level"] != LEVEL_PROBLEM:
            continue
        if _key(row) in new_problems:
            update.replaced.append(_key(row))
        else:
            merged.append(row)
            update.kept += 1
    update.added = [k for k in new_problems if k not in set(update.replaced)]
    merged.extend(new_problems.values())
    touched = {(r["solution"], r["hardware"]) for r in new_problems.values()}
    summaries = [r for r in old_rows if r["level"] == LEVEL_SOLUTION and (r["solution"], r["hardware"]) not in touched]
    for solution, hardware in sorted(touched):
        rows = [r for r in merged if (r["solution"], r["hardware"]) == (solution, hardware)]
        summaries.append(solution_row(rows))
    merged.sort(key=lambda r: (str(r["hardware"]), str(r["problem"]), str(r["solution"])))
    summaries.sort(key=lambda r: (str(r["hardware"]), str(r["solution"])))
    frame = pd.DataFrame(merged + summaries, columns=list(COLUMN_NAMES))
    update.frame = frame.astype({k: "int64" for k in _INT_COLUMNS})
    return update
