"""Terminal tables of traces (rich), kept apart from the data they show."""

from __future__ import annotations

import math
import os
import sys
from collections import defaultdict
from collections.abc import Callable

from rich.console import Console, Group
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from solbench.report.reasons import log_tail, reason, unscored_bounds
from solbench.spec.trace import Status, Trace

STATUS_STYLE = {Status.PASSED: "green", Status.SKIPPED: "dim", Status.INCORRECT_NUMERICAL: "yellow"}
UNBOUNDED_WIDTH = 100_000  # to measure a table's natural width, which rich otherwise caps at the console's
PIPED_WIDTH = UNBOUNDED_WIDTH  # a pipe or file has no width: every column is kept (see piped_width)


def piped_width() -> int:
    """Columns for output written to a pipe or a file: `COLUMNS` when it is set (a CI log read in a window of
    that width), else as wide as the tables are. A log is read later, when the reason column matters most,
    so no column is dropped for a width nobody asked for (rich would assume 80 and cut names)."""
    columns = os.environ.get("COLUMNS", "").strip()
    return int(columns) if columns.isdigit() and int(columns) >= 20 else PIPED_WIDTH


def output_console() -> Console:
    """The console tables go to (stdout): the terminal's width on a terminal (rich reads `COLUMNS` there
    too); piped or redirected, `piped_width`."""
    return Console() if sys.stdout.isatty() else Console(width=piped_width())


def fmt_ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4f}" if value < 1 else f"{value:.3f}"


def fmt_err(value: float | None) -> str:
    return "-" if value is None else f"{value:.2e}"


def speedup_verdict(speedup: float, latency_ms: float | None, ci_low_ms: float | None,
                    ci_high_ms: float | None) -> str:
    """"good" or "bad" only where the speedup's interval (the latency's confidence interval carried over to
    it) excludes 1; "" where it holds 1 or there is none: a 1.02x inside 3% noise is no speed-up."""
    if not all(isinstance(v, float) and math.isfinite(v) and v > 0 for v in (latency_ms, ci_low_ms, ci_high_ms)):
        return ""
    if speedup * latency_ms / ci_high_ms > 1:
        return "good"
    return "bad" if speedup * latency_ms / ci_low_ms < 1 else ""


def speedup_text(trace: Trace) -> str:
    """The speedup, green or red where it is beyond the noise (`speedup_verdict`), plain otherwise."""
    perf = trace.evaluation.performance
    if not perf or not perf.speedup_factor:
        return "-"
    stats = perf.latency
    verdict = speedup_verdict(float(perf.speedup_factor), perf.latency_ms, stats.ci_low_ms if stats else None,
                              stats.ci_high_ms if stats else None)
    style = {"good": "green", "bad": "red"}.get(verdict)
    return f"[{style}]{perf.speedup_factor:.2f}x[/{style}]" if style else f"{perf.speedup_factor:.2f}x"


def status_text(status: Status) -> str:
    style = STATUS_STYLE.get(status, "red")
    return f"[{style}]{status.value}[/{style}]"


def flags_text(flags: list[str]) -> str:
    return f"[yellow]{', '.join(flags)}[/yellow]" if flags else "-"


def workload_bounds(traces: list[Trace]) -> dict[tuple[str, str], tuple[float, str]]:
    """(problem, workload uuid) -> (T_SOL ms, hardware) from whichever trace of that workload has one: the
    bound belongs to the workload, so a skipped or failed solution's row can show it too."""
    bounds: dict[tuple[str, str], tuple[float, str]] = {}
    for t in traces:
        sol = t.evaluation.sol or {}
        if isinstance(sol.get("t_sol_ms"), (int, float)):
            bounds.setdefault((t.definition, t.workload_uuid), (sol["t_sol_ms"], str(sol.get("hw", "?"))))
    return bounds


WORKLOAD_COLUMNS = ("problem", "solution", "axes", "status", "latency ms", "±ci %", "ref ms", "speedup",
                    "max abs err", "flags", "T_SOL", "SOL score", "reason")
# Left out, in this order, while a table is wider than the terminal: the reason first (the `Why` section
# below the tables lists every one), then the figures a reader looks at last.
WORKLOAD_DROP_ORDER = ("reason", "±ci %", "max abs err", "ref ms", "SOL score", "flags", "T_SOL")
SUMMARY_DROP_ORDER = ("flagged", "failed", "passed")


def workload_table(traces: list[Trace], title: str = "Results", leave_out: frozenset[str] = frozenset()) -> Table:
    """One row per workload: status, latency with its spread, reference, speedup, errors, numerics flags,
    the speed-of-light bound and score, axes, and for a failed or skipped row the one-line reason
    (`reasons.reason`); the columns in `leave_out` are not shown (`fitted`)."""
    bounds = workload_bounds(traces)
    hardware = sorted({hw for _, hw in bounds.values()})
    with_reasons = any(t.status != Status.PASSED for t in traces)
    shown = [c for c in WORKLOAD_COLUMNS if c not in leave_out and (c != "reason" or with_reasons)]
    table = Table(title=title, show_lines=False)
    text_columns = ("problem", "solution", "axes", "status", "flags", "reason")
    for column in shown:
        header = (f"T_SOL ms ({hardware[0]})" if len(hardware) == 1 else "T_SOL ms") if column == "T_SOL" else column
        table.add_column(header, justify="left" if column in text_columns else "right", overflow="fold")
    for t in traces:
        perf, corr, sol = t.evaluation.performance, t.evaluation.correctness, t.evaluation.sol or {}
        ci = perf.latency.rel_ci_halfwidth if perf and perf.latency else None
        bound = bounds.get((t.definition, t.workload_uuid))
        cells = {"problem": t.definition, "solution": t.solution, "axes": axes_text(t), "status": status_text(t.status),
                 "latency ms": fmt_ms(perf.latency_ms) if perf else "-",
                 "±ci %": f"{100 * ci:.1f}" if ci is not None else "-",
                 "ref ms": fmt_ms(perf.reference_latency_ms) if perf else "-",
                 "speedup": speedup_text(t),
                 "max abs err": fmt_err(corr.max_absolute_error) if corr else "-",
                 "flags": flags_text(t.numerics_flags),
                 "T_SOL": (f"{bound[0]:.4g}" + ("" if len(hardware) == 1 else f" ({bound[1]})")) if bound else "-",
                 "SOL score": f"{sol['score']:.3f}" if isinstance(sol.get("score"), (int, float)) else "-",
                 "reason": Text(reason(t))}
        table.add_row(*(cells[c] for c in shown))
    return table


def axes_text(trace: Trace) -> str:
    return " ".join(f"{k}={v}" for k, v in trace.workload.axes.items())


def number_column(table: Table, header: str, cells: list[str]) -> None:
    """A right-aligned column of figures that is never squeezed: rich cuts a squeezed cell with an
    ellipsis (`181…` for 1811.3); `fitted` drops whole columns instead, and the caption says which."""
    width = max([len(header), *(len(c) for c in cells)], default=1)
    table.add_column(header, justify="right", no_wrap=True, min_width=min(width, 24), overflow="fold")


def rows_table(title: str, rows: list[dict[str, str]], order: tuple[str, ...], text_columns: tuple[str, ...],
               leave_out: frozenset[str] = frozenset(), headers: dict[str, str] | None = None) -> Table:
    """A table of `rows` (column -> cell) in `order`, less `leave_out`: text columns fold, figures are
    `number_column`s (never squeezed); `headers` renames a column's header."""
    table = Table(title=title)
    shown = [k for k in order if k not in leave_out]
    for key in shown:
        header = (headers or {}).get(key, key)
        if key in text_columns:
            table.add_column(header, justify="left", overflow="fold")
        else:
            number_column(table, header, [row[key] for row in rows])
    for row in rows:
        table.add_row(*(row[k] for k in shown))
    return table


def fitted(console: Console, build: Callable[[frozenset[str]], Table], drop_order: tuple[str, ...]) -> Table:
    """The table `build` makes, less as few columns of `drop_order` as make it fit the console's width
    with no cell cut short (rich would otherwise squeeze every column to a few letters); a caption names
    what was left out. What still does not fit wraps inside its cells, never cut."""
    unbounded = console.options.update(max_width=UNBOUNDED_WIDTH)
    left_out: list[str] = []
    table = build(frozenset())
    for column in drop_order:
        if Measurement.get(console, unbounded, table).maximum <= console.width:
            break
        left_out.append(column)
        table = build(frozenset(left_out))
    if left_out:
        table.caption = f"left out to fit {console.width} columns: {', '.join(left_out)} (a wider terminal shows them)"
    return table


def failures_section(traces: list[Trace], max_groups: int = 40) -> Group | None:
    """After the tables: every failed or skipped (problem, solution) with its reason, workloads that share
    a reason grouped, and the end of the log of each failure (where a traceback says what broke)."""
    groups: dict[tuple[str, str, str, str], list[Trace]] = defaultdict(list)
    for t in traces:
        if t.status != Status.PASSED:
            groups[(t.definition, t.solution, t.status.value, reason(t))].append(t)
    if not groups:
        return None
    failed = sum(t.status.failed for t in traces)
    skipped = sum(t.status == Status.SKIPPED for t in traces)
    lines = [Text(f"Why: {failed} failed, {skipped} skipped", style="bold")]
    ordered = sorted(groups.items(), key=lambda kv: (not Status(kv[0][2]).failed, kv[0]))
    for (problem, solution, status, why), items in ordered[:max_groups]:
        which = (axes_text(items[0]) or items[0].workload_uuid
                 if len(items) == 1 else f"{len(items)} workloads")
        line = Text("  ")
        line.append(status, style=STATUS_STYLE.get(Status(status), "red"))
        line.append(f" {solution} on {problem} ({which}): {why}")
        lines.append(line)
        if Status(status).failed:
            tail = [entry for entry in log_tail(items[0]) if entry.strip() not in why]
            lines += [Text(f"      {entry}", style="dim") for entry in tail]
    if len(ordered) > max_groups:
        lines.append(Text(f"  ... and {len(ordered) - max_groups} more (the traces have every log)"))
    return Group(*lines)


def sol_note(traces: list[Trace]) -> str | None:
    """What the T_SOL column means when the bounds are not this machine's: said plainly, with the GPU named
    and where it came from (`unscored_bounds`)."""
    sentence = unscored_bounds(traces)
    if sentence is None:
        return None
    return (f"Speed of light: {sentence} CPU latencies are not scored: a SOL score compares a GPU kernel's time "
            f"with that GPU's bound, and a CPU time says nothing about it. Run on a GPU for scores (--hw NAME "
            f"picks the GPU whose bounds are shown).")


def print_results(console: Console, traces: list[Trace], max_rows: int = 60) -> None:
    """What a run shows after it (`solbench run`, the pytest plugin's section): one row per workload when
    there are at most `max_rows`, one per (problem, solution), why each row did not pass, the SOL note."""
    if len(traces) <= max_rows:
        console.print(fitted(console, lambda leave_out: workload_table(traces, leave_out=leave_out), WORKLOAD_DROP_ORDER))
    console.print(fitted(console, lambda leave_out: summary_table(traces, leave_out=leave_out), SUMMARY_DROP_ORDER))
    for extra in (failures_section(traces), sol_note(traces)):
        if extra is not None:
            console.print(extra)


def summary_table(traces: list[Trace], title: str = "Summary", leave_out: frozenset[str] = frozenset()) -> Table:
    """One row per (problem, solution): counts by status and the geometric-mean speedup (less the columns
    in `leave_out`)."""
    groups: dict[tuple[str, str], list[Trace]] = defaultdict(list)
    for t in traces:
        groups[(t.definition, t.solution)].append(t)
    table = Table(title=title)
    shown = [c for c in ("problem", "solution", "workloads", "passed", "failed", "flagged", "statuses",
                         "geomean speedup") if c not in leave_out]
    for column in shown:
        table.add_column(column, justify="left" if column in ("problem", "solution", "statuses") else "right",
                         overflow="fold")
    for (problem, solution), items in sorted(groups.items()):
        passed = sum(t.status == Status.PASSED for t in items)
        failed = sum(t.status.failed for t in items)
        counts: dict[str, int] = defaultdict(int)
        for t in items:
            counts[t.status.value] += 1
        speedups = [t.evaluation.performance.speedup_factor for t in items
                    if t.evaluation.performance and t.evaluation.performance.speedup_factor]
        geomean = math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if speedups else None
        statuses = ", ".join(f"{status_text(Status(k))}×{v}" for k, v in sorted(counts.items()))
        flagged = sum(1 for t in items if t.status == Status.PASSED and t.numerics_flags)
        cells = {"problem": problem, "solution": solution, "workloads": str(len(items)), "passed": str(passed),
                 "failed": str(failed), "flagged": f"[yellow]{flagged}[/yellow]" if flagged else "0",
                 "statuses": statuses, "geomean speedup": f"{geomean:.2f}x" if geomean else "-"}
        table.add_row(*(cells[c] for c in shown))
    return table
