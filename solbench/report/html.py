"""`solbench report`: one self-contained HTML page (inline CSS and SVG, no scripts, nothing fetched).

Per hardware: the SOL-score distribution, the speedup of every (problem, solution) over the
reference, and one chart per problem of measured latency against T_SOL. That last chart is the
roofline in the form the traces can support honestly: T_SOL already is the roofline bound of each
workload (max of compute time and memory time), so a point's height above the y = x line is exactly
how far the kernel is from the speed of light, whatever bounds it. Missing figures show as "n/a".
"""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import UTC, datetime
from html import escape

import pandas as pd

from solbench import __version__
from solbench.report import svg
from solbench.report.leaderboard import COLUMNS, LEVEL_PROBLEM, latency_ms, leaderboard, sol_value
from solbench.report.merge import MergeResult, hardware_of
from solbench.report.reasons import reason, unscored_bounds
from solbench.report.table import speedup_verdict
from solbench.spec.trace import Status, Trace

TABLE_COLUMNS = ("solution", "problem", "workloads", "passed", "failed", "numerics_flagged", "skipped", "conflicts",
                 "pass_rate",
                 "geomean_latency_ms", "geomean_t_sol_ms", "geomean_speedup_vs_reference",
                 "geomean_speedup_vs_baseline", "mean_sol_score", "fast_1", "fast_2")
PERCENT_COLUMNS = {"pass_rate", "fast_1", "fast_2"}

CSS = """
body { font-family: system-ui, sans-serif; margin: 24px auto; max-width: 1400px; color: #222; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 18px; margin-top: 28px; border-bottom: 1px solid #ddd; }
h3 { font-size: 15px; margin: 18px 0 6px; }
.meta { color: #666; font-size: 13px; }
.tiles { display: flex; gap: 12px; margin: 14px 0; flex-wrap: wrap; }
.tile { border: 1px solid #ddd; border-radius: 6px; padding: 8px 14px; min-width: 120px; }
.tile b { display: block; font-size: 20px; }
table { border-collapse: collapse; font-size: 12px; margin: 8px 0; }
th, td { border-bottom: 1px solid #eee; padding: 3px 6px; text-align: right; white-space: nowrap; }
th { background: #f6f6f6; cursor: help; } td.text, th.text { text-align: left; }
table.leaderboard { width: 100%; }
table.leaderboard th { white-space: normal; vertical-align: bottom; min-width: 3.5em; }
table.leaderboard td.text { white-space: normal; overflow-wrap: anywhere; min-width: 10em; }
tr.summary td { font-weight: 600; background: #fafafa; }
td.na { color: #aaa; } td.bad { color: #c00; } td.good { color: #080; } td.flagged { color: #b36b00; }
.scroll { overflow-x: auto; }
.charts { display: flex; flex-wrap: wrap; gap: 14px; align-items: flex-start; }
.chart { border: 1px solid #eee; border-radius: 4px; max-width: 100%; height: auto; }
.warn { background: #fff4e5; border: 1px solid #f0c36d; padding: 8px 12px; border-radius: 4px; }
pre { white-space: pre-wrap; font-size: 11px; margin: 2px 0; color: #555; max-height: 6em; overflow: auto; }
"""


def speedup_class(speedup: float, row: dict) -> str:
    """"good" or "bad" only where the speedup's confidence interval excludes 1 (`table.speedup_verdict`, the
    row's latency CI carried over to the speedup); a speedup whose interval holds 1 (or has none) is not
    coloured, whatever its sign."""
    return speedup_verdict(speedup, *(row.get(k) for k in ("geomean_latency_ms", "latency_ci_low_ms",
                                                            "latency_ci_high_ms")))


def _cell(column: str, value, row: dict | None = None) -> str:
    if isinstance(value, float) and math.isnan(value):
        return '<td class="na">n/a</td>'
    if column in PERCENT_COLUMNS:
        return f"<td>{100 * value:.0f}%</td>"
    if column.startswith("geomean_speedup"):
        css = (row or {}).get(f"_{column}_class") or speedup_class(value, row or {})
        why = "" if css else ' title="not coloured: within the measured noise (its interval holds 1), or no interval"'
        return f'<td class="{css}"{why}>{value:.2f}x</td>'
    if column == "mean_sol_score":
        return f"<td>{value:.3f}</td>"
    if isinstance(value, float):
        return f"<td>{value:.4g}</td>"
    if column == "failed" and value:
        return f'<td class="bad">{value}</td>'
    if column == "numerics_flagged" and value:
        return f'<td class="flagged">{value}</td>'
    css = ' class="text"' if column in ("solution", "problem") else ""
    return f"<td{css}>{escape(str(value))}</td>"


def _summary_speedup_classes(summary: dict, problem_rows: list[dict]) -> None:
    """A summary row has no latency interval of its own: its speedup is coloured when every problem row's
    speedup is coloured alike (all faster, or all slower, beyond their noise)."""
    for column in ("geomean_speedup_vs_reference", "geomean_speedup_vs_baseline"):
        classes = {speedup_class(r[column], r) if isinstance(r[column], float) else "" for r in problem_rows}
        summary[f"_{column}_class"] = classes.pop() if len(classes) == 1 else ""


def header_label(column: str) -> str:
    """A CSV column name as a header that can wrap: words, with T_SOL kept whole."""
    return column.replace("t_sol", "T-SOL").replace("_", " ").replace("T-SOL", "T_SOL")


def leaderboard_table(frame: pd.DataFrame) -> str:
    """The leaderboard rows; headers wrap at their words and long names anywhere, so the table fits the
    page (1400 px) instead of scrolling sideways. A header's tooltip names its CSV column and meaning."""
    described = {c.name: c.description for c in COLUMNS}
    head = "".join(f'<th class="{"text" if c in ("solution", "problem") else ""}" '
                   f'title="{escape(c)}: {escape(described[c])}">{escape(header_label(c))}</th>'
                   for c in TABLE_COLUMNS)
    rows = []
    records = frame.to_dict(orient="records")
    single = {(r["solution"], r["hardware"]) for r in records if r["level"] != LEVEL_PROBLEM and r["problems"] == 1}
    for row in records:
        key = (row["solution"], row["hardware"])
        if row["level"] != LEVEL_PROBLEM:
            if key in single:
                continue  # a solution of one problem: that problem's row is its summary, shown bold instead
            _summary_speedup_classes(row, [r for r in records if r["level"] == LEVEL_PROBLEM
                                           and (r["solution"], r["hardware"]) == key])
        css = "summary" if row["level"] != LEVEL_PROBLEM or key in single else ""
        rows.append(f'<tr class="{css}">' + "".join(_cell(c, row[c], row) for c in TABLE_COLUMNS) + "</tr>")
    return (f'<div class="scroll"><table class="leaderboard"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


def roofline_charts(traces: list[Trace], solutions: list[str]) -> list[str]:
    """One latency-vs-T_SOL chart per problem; every solution a colour (as in the speedup chart), the reference hollow."""
    charts = []
    by_problem: dict[str, list[Trace]] = defaultdict(list)
    for t in traces:
        by_problem[t.definition].append(t)
    for problem, items in sorted(by_problem.items()):
        points, seen_reference = [], set()
        for t in items:
            t_sol, latency = sol_value(t, "t_sol_ms"), latency_ms(t)
            if t.status != Status.PASSED or not t_sol or not latency:
                continue
            axes = " ".join(f"{k}={v}" for k, v in t.workload.axes.items())
            score = sol_value(t, "score")
            points.append(svg.Point(t_sol, latency, solutions.index(t.solution),
                                    f"{t.solution} {axes}: {latency:.4g} ms, T_SOL {t_sol:.4g} ms, score "
                                    f"{'n/a' if score is None else f'{score:.3f}'}"))
            ref = t.evaluation.performance.reference_latency_ms
            if ref and t.workload_uuid not in seen_reference:
                seen_reference.add(t.workload_uuid)
                points.append(svg.Point(t_sol, ref, solutions.index(t.solution), f"reference {axes}: {ref:.4g} ms",
                                        hollow=True))
        present = sorted({t.solution for t in items})
        charts.append(svg.sol_scatter(points, [(s, solutions.index(s)) for s in present], f"{problem}: latency vs T_SOL",
                                      has_reference=bool(seen_reference)))
    return charts


def speedup_chart(frame: pd.DataFrame, solutions: list[str]) -> str:
    rows = frame[frame["level"] == LEVEL_PROBLEM]
    bars = [svg.Bar(f"{r['problem']} · {r['solution']}", r["geomean_speedup_vs_reference"],
                    solutions.index(r["solution"]), f"over {r['passed']} passed workload(s)")
            for r in rows.to_dict(orient="records")]
    return svg.speedup_bars(bars, [(s, i) for i, s in enumerate(solutions) if s in set(rows["solution"])])


def failures_list(traces: list[Trace], limit: int = 50) -> str:
    """Each failure with its one-line reason and the end of its log; skipped workloads grouped by reason."""
    failed = [t for t in traces if t.status.failed]
    items = []
    for t in failed[:limit]:
        axes = ", ".join(f"{k}={v}" for k, v in t.workload.axes.items())
        items.append(f"<li><b>{escape(t.status.value)}</b> {escape(t.definition)} / {escape(t.solution)} "
                     f"({escape(axes)}): {escape(reason(t))}<pre>{escape((t.evaluation.log or '')[-600:])}</pre></li>")
    more = f"<p>... and {len(failed) - limit} more.</p>" if len(failed) > limit else ""
    listed = f"<ul class=\"failures\">{''.join(items)}</ul>{more}" if failed else "<p>No failures.</p>"
    skipped: dict[tuple[str, str, str], int] = defaultdict(int)
    for t in traces:
        if t.status == Status.SKIPPED:
            skipped[(t.definition, t.solution, reason(t))] += 1
    if skipped:
        rows = "".join(f"<li>{escape(problem)} / {escape(solution)} ({count} workload(s)): {escape(why)}</li>"
                       for (problem, solution, why), count in sorted(skipped.items()))
        listed += f'<h3>Skipped</h3><ul class="skipped">{rows}</ul>'
    return listed


def unscored_note(traces: list[Trace]) -> str:
    """Said plainly when the bounds are another GPU's and the latencies are not scored (a CPU run)."""
    sentence = unscored_bounds(traces)
    if sentence is None:
        return ""
    return (f'<p class="warn">{escape(sentence)} These latencies are not scored: a SOL score compares a GPU '
            f"kernel's time with that GPU's bound, and a CPU time says nothing about it. The charts below show how "
            f"far each measured time is from that GPU's speed of light, for scale only.</p>")


def flagged_list(traces: list[Trace], limit: int = 50) -> str:
    """Passed workloads whose numerics were flagged: the official verdict, and why strict mode differs."""
    flagged = [t for t in traces if t.status == Status.PASSED and t.numerics_flags]
    if not flagged:
        return "<p>No flagged numerics.</p>"
    items = []
    for t in flagged[:limit]:
        axes = ", ".join(f"{k}={v}" for k, v in t.workload.axes.items())
        detail = t.evaluation.correctness.message or ""
        items.append(f"<li><b>{escape(', '.join(t.numerics_flags))}</b> {escape(t.definition)} / "
                     f"{escape(t.solution)} ({escape(axes)})<pre>{escape(detail[-600:])}</pre></li>")
    more = f"<p>... and {len(flagged) - limit} more.</p>" if len(flagged) > limit else ""
    return f"<ul class=\"flagged\">{''.join(items)}</ul>{more}"


def hardware_section(hardware: str, traces: list[Trace], frame: pd.DataFrame) -> str:
    solutions = sorted({t.solution for t in traces})
    evaluated = [t for t in traces if t.status != Status.SKIPPED]
    passed = [t for t in evaluated if t.status == Status.PASSED]
    scores = [s for s in (sol_value(t, "score") for t in passed) if s is not None]
    failed = len(evaluated) - len(passed)
    unscored = any((t.evaluation.sol or {}).get("unscored") for t in passed)
    histogram = svg.score_histogram(scores, failed if scores else 0,
                                    empty_reason="CPU latencies are not scored (see above)" if unscored else None)
    scored = f"{len(scores)}/{len(passed)} passed workloads have a SOL score"
    mean_score = (sum(scores) / len(evaluated) if evaluated and len(scores) == len(passed) else None)
    tiles = [("workloads", str(len(traces))), ("passed", f"{len(passed)}/{len(evaluated)}"),
             ("skipped", str(len(traces) - len(evaluated))),
             ("mean SOL score", "n/a" if mean_score is None else f"{mean_score:.3f}")]
    tile_html = "".join(f'<div class="tile">{escape(k)}<b>{escape(v)}</b></div>' for k, v in tiles)
    return (f'<section class="hardware"><h2>{escape(hardware)}</h2><div class="tiles">{tile_html}</div>'
            f"{unscored_note(traces)}<h3>Leaderboard</h3>{leaderboard_table(frame)}"
            f'<h3>Scores and speedups</h3><p class="meta">{escape(scored)}; failed workloads score 0.</p>'
            f'<div class="charts">{histogram}{speedup_chart(frame, solutions)}</div>'
            f"<h3>Latency against the speed of light, per problem</h3>"
            f'<p class="meta">Each filled point is one passed workload of a solution; hollow points are the '
            f"reference on the same workload. The dashed diagonal is T_SOL (the roofline bound of the workload): "
            f"the higher above it, the further from the speed of light.</p>"
            f'<div class="charts">{"".join(roofline_charts(traces, solutions))}</div>'
            f"<h3>Failures</h3>{failures_list(traces)}"
            f'<h3>Flagged numerics</h3><p class="meta">Passed under the official rules; strict mode '
            f"(<code>--strict</code>, the pytest gate's default) fails them.</p>{flagged_list(traces)}</section>")


def render_report(merged: MergeResult, title: str = "solbench report", sources: list[str] | None = None,
                  malformed_lines: int = 0) -> str:
    """The whole page as a string."""
    frame = leaderboard(merged)
    by_hardware: dict[str, list[Trace]] = defaultdict(list)
    for t in merged.traces:
        by_hardware[hardware_of(t)].append(t)
    notes = []
    if merged.conflicts:
        listed = "".join(f"<li>{escape(c.describe())}</li>" for c in merged.conflicts[:100])
        notes.append(f'<div class="warn"><b>{len(merged.conflicts)} conflicting duplicate(s)</b>: the same kernel '
                     f"on the same workload and hardware got different statuses in different traces; these "
                     f"workloads are left out of every figure.<ul>{listed}</ul></div>")
    if malformed_lines:
        notes.append(f'<div class="warn">{malformed_lines} unreadable trace line(s) were skipped.</div>')
    meta = (f"{len(merged.traces)} traces from {len(sources or [])} file(s); {merged.superseded} older duplicate(s) "
            f"superseded; generated {datetime.now(UTC).isoformat(timespec='seconds')} by solbench {__version__}")
    sections = "".join(hardware_section(hw, traces, frame[frame["hardware"] == hw])
                       for hw, traces in sorted(by_hardware.items()))
    if not sections:
        sections = "<p>No traces.</p>"
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{CSS}</style></head><body><h1>{escape(title)}</h1>"
            f'<p class="meta">{escape(meta)}</p>{"".join(notes)}{sections}</body></html>\n')
