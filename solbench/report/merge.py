"""Merging traces from several runs and machines without silently mixing contradicting results.

Two traces are duplicates when they share (problem, solution_hash, workload uuid, hardware): the same
code on the same workload on the same kind of GPU. The rules (docs/leaderboard.md):

- same status: keep the latest by timestamp (ties: the one read last) and count the others as
  `superseded` -- a re-run replaces an older measurement of the same thing;
- one SKIPPED, the others not: SKIPPED means "no result here", so the real result wins;
- different non-skipped statuses (PASSED in one file, TIMEOUT in another): a conflict. Every copy
  is set aside, the workload counts in no aggregate, and the conflict is reported.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from solbench.report.traces import read_trace_lines
from solbench.spec.errors import SpecError
from solbench.spec.problem import WORKLOAD_FILE
from solbench.spec.trace import Status, Trace

UNKNOWN_HARDWARE = "unknown"


@dataclass(frozen=True)
class SourcedTrace:
    """A trace and where it was read from (file and line), so conflicts can point at both copies."""

    trace: Trace
    source: str = ""

    @property
    def hardware(self) -> str:
        return hardware_of(self.trace)

    @property
    def key(self) -> tuple[str, str, str, str]:
        t = self.trace
        return (t.definition, t.solution_hash, t.workload_uuid, self.hardware)


@dataclass
class Conflict:
    """Copies of one evaluation whose statuses disagree."""

    key: tuple[str, str, str, str]
    copies: list[SourcedTrace]

    def describe(self) -> str:
        problem, digest, uuid, hardware = self.key
        parts = ", ".join(f"{c.trace.status.value} ({c.source or 'unknown source'}, {c.trace.evaluation.timestamp})"
                          for c in self.copies)
        return f"{problem} / {self.copies[0].trace.solution} [{digest}] workload {uuid} on {hardware}: {parts}"


@dataclass
class MergeResult:
    traces: list[Trace]
    superseded: int = 0  # older copies with the same status, dropped in favour of the latest
    skipped_duplicates: int = 0  # SKIPPED copies dropped because a real result exists
    conflicts: list[Conflict] = field(default_factory=list)

    def conflict_counts(self) -> dict[tuple[str, str, str], int]:
        """Conflicting workloads per (problem, solution_hash, hardware), for the leaderboard column."""
        counts: dict[tuple[str, str, str], int] = defaultdict(int)
        for c in self.conflicts:
            counts[(c.key[0], c.key[1], c.key[3])] += 1
        return dict(counts)


@dataclass
class LoadResult:
    traces: list[SourcedTrace]
    malformed: dict[str, list[int]]  # file -> 1-based line numbers that could not be read


def hardware_of(trace: Trace) -> str:
    env = trace.evaluation.environment
    return (env.hardware if env and env.hardware else "") or UNKNOWN_HARDWARE


def trace_files(paths: Iterable[str | Path]) -> list[Path]:
    """Trace files named directly, or every `*.jsonl` under a folder except a problem's `workload.jsonl`
    (a folder of problems holds workloads, not traces)."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(f for f in path.rglob("*.jsonl") if f.name != WORKLOAD_FILE)
            if not found:
                raise SpecError(f"no trace files (*.jsonl) under {path}")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise SpecError(f"trace file {path} does not exist")
    return files


def load_sourced(paths: Iterable[str | Path]) -> LoadResult:
    """Every readable trace with its file:line, and the lines that could not be read."""
    traces: list[SourcedTrace] = []
    malformed: dict[str, list[int]] = {}
    for path in trace_files(paths):
        try:
            lines = path.read_text().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise SpecError(f"cannot read {path}: {exc}") from None
        for lineno, line in enumerate(lines, 1):
            if not line.strip():
                continue
            found, bad = read_trace_lines([line])
            if bad:
                malformed.setdefault(str(path), []).append(lineno)
            traces += [SourcedTrace(t, f"{path}:{lineno}") for t in found]
    return LoadResult(traces, malformed)


def merge(traces: Iterable[SourcedTrace | Trace]) -> MergeResult:
    """One trace per (problem, solution_hash, workload, hardware), following the module's rules."""
    groups: dict[tuple[str, str, str, str], list[SourcedTrace]] = defaultdict(list)
    for item in traces:
        sourced = item if isinstance(item, SourcedTrace) else SourcedTrace(item)
        groups[sourced.key].append(sourced)
    result = MergeResult(traces=[])
    for key, copies in groups.items():
        real = [c for c in copies if c.trace.status != Status.SKIPPED]
        if real and len(real) < len(copies):
            result.skipped_duplicates += len(copies) - len(real)
            copies = real
        statuses = {c.trace.status for c in copies}
        if len(statuses) > 1:
            result.conflicts.append(Conflict(key, copies))
            continue
        # max() keeps the first of equal keys; enumerate makes "read last" win ties.
        latest = max(enumerate(copies), key=lambda ic: (ic[1].trace.evaluation.timestamp or "", ic[0]))[1]
        result.superseded += len(copies) - 1
        result.traces.append(latest.trace)
    return result
