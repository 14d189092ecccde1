"""Terminal tables of traces (rich), kept apart from the data they show."""

from __future__ import annotations

import math
import sys
from collections import defaultdict

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from solbench.report.reasons import log_tail, reason
from solbench.spec.trace import Status, Trace

STATUS_STYLE = {Status.PASSED: "green", Status.SKIPPED: "dim", Status.INCORRECT_NUMERICAL: "yellow"}
PIPED_WIDTH = 320  # columns for a table written to a pipe or file: rich would assume 80 and cut names


def output_console() -> Console:
    """The console tables go to (stdout): the terminal's width on a terminal; piped or redirected, wide
    enough that no name or figure is cut short (a pipe has no width)."""
    return Console() if sys.stdout.isatty() else Console(width=PIPED_WIDTH)


def fmt_ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4f}" if value < 1 else f"{value:.3f}"


def fmt_err(value: float | None) -> str:
    return "-" if value is None else f"{value:.2e}"


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


def workload_table(traces: list[Trace], title: str = "Results") -> Table:
    """One row per workload: status, latency with its spread, reference, speedup, errors, numerics flags,
    the speed-of-light bound and score, axes, and for a failed or skipped row the one-line reason
    (`reasons.reason`)."""
    bounds = workload_bounds(traces)
    hardware = sorted({hw for _, hw in bounds.values()})
    t_sol_column = f"T_SOL ms ({hardware[0]})" if len(hardware) == 1 else "T_SOL ms"
    with_reasons = any(t.status != Status.PASSED for t in traces)
    table = Table(title=title, show_lines=False)
    text_columns = ("problem", "solution", "axes", "status", "flags")
    for column in ("problem", "solution", "axes", "status", "latency ms", "±ci %", "ref ms", "speedup",
                   "max abs err", "flags", t_sol_column, "SOL score"):
        table.add_column(column, justify="left" if column in text_columns else "right")
    if with_reasons:
        table.add_column("reason", justify="left", no_wrap=True, max_width=70, overflow="ellipsis")
    for t in traces:
        perf, corr, sol = t.evaluation.performance, t.evaluation.correctness, t.evaluation.sol or {}
        ci = perf.latency.rel_ci_halfwidth if perf and perf.latency else None
        axes = " ".join(f"{k}={v}" for k, v in t.workload.get("axes", {}).items())
        bound = bounds.get((t.definition, t.workload_uuid))
        row = [t.definition, t.solution, axes, status_text(t.status),
               fmt_ms(perf.latency_ms) if perf else "-",
               f"{100 * ci:.1f}" if ci is not None else "-",
               fmt_ms(perf.reference_latency_ms) if perf else "-",
               f"{perf.speedup_factor:.2f}x" if perf and perf.speedup_factor else "-",
               fmt_err(corr.max_absolute_error) if corr else "-",
               flags_text(t.numerics_flags),
               (f"{bound[0]:.4g}" + ("" if len(hardware) == 1 else f" ({bound[1]})")) if bound else "-",
               f"{sol['score']:.3f}" if isinstance(sol.get("score"), (int, float)) else "-"]
        if with_reasons:
            row.append(Text(reason(t)))
        table.add_row(*row)
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
        which = (" ".join(f"{k}={v}" for k, v in items[0].workload.get("axes", {}).items()) or items[0].workload_uuid
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
    """What the T_SOL column means when the bounds are not this machine's: said plainly, with the GPU named."""
    unscored = [t for t in traces if (t.evaluation.sol or {}).get("unscored")]
    if not unscored:
        return None
    hardware = ", ".join(sorted({str(t.evaluation.sol.get("hw")) for t in unscored}))
    return (f"Speed of light: T_SOL is each workload's bound on {hardware} (the solution's target GPU; B200 "
            f"where a solution declares none), because this run has no GPU and no --hw. CPU latencies are not "
            f"scored: a SOL score compares a GPU kernel's time with that GPU's bound, and a CPU time says "
            f"nothing about it. Run on a GPU for scores (--hw NAME picks the GPU whose bounds are shown).")


def print_results(console: Console, traces: list[Trace], max_rows: int = 60) -> None:
    """What a run shows after it (`solbench run`, the pytest plugin's section): one row per workload when
    there are at most `max_rows`, one per (problem, solution), why each row did not pass, the SOL note."""
    if len(traces) <= max_rows:
        console.print(workload_table(traces))
    console.print(summary_table(traces))
    for extra in (failures_section(traces), sol_note(traces)):
        if extra is not None:
            console.print(extra)


def summary_table(traces: list[Trace], title: str = "Summary") -> Table:
    """One row per (problem, solution): counts by status and the geometric-mean speedup."""
    groups: dict[tuple[str, str], list[Trace]] = defaultdict(list)
    for t in traces:
        groups[(t.definition, t.solution)].append(t)
    table = Table(title=title)
    for column in ("problem", "solution", "workloads", "passed", "failed", "flagged", "statuses", "geomean speedup"):
        table.add_column(column, justify="left" if column in ("problem", "solution", "statuses") else "right")
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
        table.add_row(problem, solution, str(len(items)), str(passed), str(failed),
                      f"[yellow]{flagged}[/yellow]" if flagged else "0", statuses,
                      f"{geomean:.2f}x" if geomean else "-")
    return table
