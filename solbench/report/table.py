"""Terminal tables of traces (rich), kept apart from the data they show."""

from __future__ import annotations

from collections import defaultdict

from rich.table import Table

from solbench.spec.trace import Status, Trace

STATUS_STYLE = {Status.PASSED: "green", Status.SKIPPED: "dim", Status.INCORRECT_NUMERICAL: "yellow"}


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


def workload_table(traces: list[Trace], title: str = "Results") -> Table:
    """One row per workload: status, latency with its spread, reference, speedup, errors, numerics
    flags, axes."""
    table = Table(title=title, show_lines=False)
    text_columns = ("problem", "solution", "axes", "status", "flags")
    for column in ("problem", "solution", "axes", "status", "latency ms", "±ci %", "ref ms", "speedup",
                   "max abs err", "flags", "SOL score"):
        table.add_column(column, justify="left" if column in text_columns else "right")
    for t in traces:
        perf, corr, sol = t.evaluation.performance, t.evaluation.correctness, t.evaluation.sol or {}
        ci = perf.latency.rel_ci_halfwidth if perf and perf.latency else None
        axes = " ".join(f"{k}={v}" for k, v in t.workload.get("axes", {}).items())
        table.add_row(t.definition, t.solution, axes, status_text(t.status),
                      fmt_ms(perf.latency_ms) if perf else "-",
                      f"{100 * ci:.1f}" if ci is not None else "-",
                      fmt_ms(perf.reference_latency_ms) if perf else "-",
                      f"{perf.speedup_factor:.2f}x" if perf and perf.speedup_factor else "-",
                      fmt_err(corr.max_absolute_error) if corr else "-",
                      flags_text(t.numerics_flags),
                      f"{sol['score']:.3f}" if isinstance(sol.get("score"), (int, float)) else "-")
    return table


def summary_table(traces: list[Trace], title: str = "Summary") -> Table:
    """One row per (problem, solution): counts by status and the geometric-mean speedup."""
    import math

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
