"""Trace files (JSON Lines): appended and flushed per workload, read back for resume and reports."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from solbench.report import signing
from solbench.report.workdir import solbench_folder
from solbench.spec.errors import SpecError
from solbench.spec.trace import Trace

RUNS_DIR = Path(".solbench") / "runs"  # under the working directory: a run without -o keeps its traces here
RUNS_DIR_VARIABLE = "SOLBENCH_RUNS_DIR"  # names another folder for them (the test suite's: a temporary one)


def default_trace_path(root: Path | None = None) -> Path:
    """A new file for the traces of a run that names none: `<UTC time>.jsonl` in $SOLBENCH_RUNS_DIR, else
    in `.solbench/runs/` under the working directory (git-ignored in a checkout), never inside the
    installed package."""
    named = os.environ.get(RUNS_DIR_VARIABLE)
    folder = Path(named) if named and root is None else solbench_folder(root) / RUNS_DIR.name
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    path, n = folder / f"{stamp}.jsonl", 2
    while path.exists():
        path, n = folder / f"{stamp}-{n}.jsonl", n + 1
    return path


class TraceFile:
    """An append-only trace file that survives being killed mid-write.

    Each trace is one line, written with a single `write`, flushed and fsync'ed before the next
    workload starts. A line cut short by a kill is dropped when the file is reopened, so a resumed
    run neither loses finished results nor duplicates them. Lines are signed with the file's key
    (`report/signing.py`); on reopening, a line the key did not sign is refused: moved to
    `<file>.refused`, counted in `refused_lines`, and its workload evaluated again. A file written
    before signing (lines, but no key) stays unsigned, and says so (`unsigned`).
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._repair_tail()
        self.skipped_lines = 0
        self.refused_lines = 0
        has_lines = self.path.exists() and self.path.stat().st_size > 0
        self.key = signing.load_key(self.path, create=False)
        self.unsigned = has_lines and self.key is None
        if self.key is None and not has_lines:
            self.key = signing.load_key(self.path, create=True)
        if self.key is not None and has_lines:
            self._refuse_unsigned()
        self.earlier = self._read_existing()  # what the file held when opened: a resumed run's tables show it too
        self._done = {t.key() for t in self.earlier}

    @property
    def refused_path(self) -> Path:
        return self.path.with_name(self.path.name + ".refused")

    def _refuse_unsigned(self) -> None:
        """Keep the lines this file's key signed; move the others aside."""
        lines = self.path.read_text().splitlines(keepends=True)
        kept = [line for line in lines if not line.strip() or signing.verify(self.key, line)]
        refused = [line for line in lines if line.strip() and not signing.verify(self.key, line)]
        if not refused:
            return
        self.refused_lines = len(refused)
        with open(self.refused_path, "a") as f:
            f.writelines(line if line.endswith("\n") else line + "\n" for line in refused)
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.write_text("".join(kept))
        os.replace(temporary, self.path)

    def _repair_tail(self) -> None:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        with open(self.path, "rb+") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) == b"\n":
                return
            f.seek(0)
            data = f.read()
            cut = data.rfind(b"\n") + 1  # keep everything up to the last complete line
            f.truncate(cut)

    def _read_existing(self) -> list[Trace]:
        if not self.path.exists():
            return []
        traces, bad = read_trace_lines(self.path.read_text().splitlines())
        self.skipped_lines = bad
        return traces

    def is_done(self, definition: str, solution_hash: str, workload_uuid: str) -> bool:
        return (definition, solution_hash, workload_uuid) in self._done

    @property
    def done_count(self) -> int:
        return len(self._done)

    def append(self, trace: Trace) -> None:
        line = json.dumps(trace.to_dict(), allow_nan=False, separators=(",", ":"))
        line = (signing.sign(self.key, line) if self.key is not None else line) + "\n"
        with self._lock:
            with open(self.path, "a") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
            self._done.add(trace.key())


def read_trace_lines(lines: Iterable[str]) -> tuple[list[Trace], int]:
    """Parse trace lines; returns the traces and the number of unreadable lines."""
    traces, bad = [], 0
    for line in lines:
        if not line.strip():
            continue
        try:
            traces.append(Trace.from_json(line))
        except SpecError:
            bad += 1
    return traces, bad


def read_traces(paths: Iterable[str | Path]) -> list[Trace]:
    """All traces in the given files; an unreadable line, or one a signed file's key did not sign, is
    skipped; a missing file is an error."""
    traces: list[Trace] = []
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise SpecError(f"trace file {path} does not exist")
        lines = path.read_text().splitlines()
        key = signing.load_key(path, create=False)
        if key is not None:  # a signed file: lines its key did not sign are not its orchestrator's
            lines = [line for line in lines if signing.verify(key, line)]
        found, _ = read_trace_lines(lines)
        traces += found
    return traces
