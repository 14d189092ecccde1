"""Terminal tables: numerics flags of passed workloads, reasons on rows that did not pass, the 'Why'
section, the T_SOL column and its note."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from solbench.report.table import (
    PIPED_WIDTH,
    failures_section,
    print_results,
    sol_note,
    summary_table,
    workload_table,
)
from solbench.spec.trace import Trace
from tests.report.conftest import make_trace, sol


def rendered(table) -> str:
    console = Console(record=True, width=260, color_system=None)
    console.print(table)
    return console.export_text()


def test_workload_table_has_a_flags_column():
    text = rendered(workload_table([make_trace(uuid="w0", flags=["outliers", "systematic_bias"]),
                                    make_trace(uuid="w1")]))
    header = next(line for line in text.splitlines() if "status" in line)
    assert "flags" in header
    flagged = next(line for line in text.splitlines() if "outliers" in line)
    assert "systematic_bias" in flagged and "PASSED" in flagged


def test_summary_table_counts_flagged_workloads():
    text = rendered(summary_table([make_trace(uuid="w0", flags=["outliers"]), make_trace(uuid="w1"),
                                   make_trace(uuid="w2", status="INCORRECT_NUMERICAL", flags=["outliers"])]))
    header = next(line for line in text.splitlines() if "workloads" in line)
    cells = next(line for line in text.splitlines() if "rmsnorm" in line).split()
    columns = header.split()
    assert cells[columns.index("flagged")] == "1" and cells[columns.index("passed")] == "2"


def render(*renderables) -> str:
    console = Console(width=320, record=True, file=io.StringIO())
    for r in renderables:
        console.print(r)
    return console.export_text()


def unscored(t_sol_ms: float) -> dict:
    return {**sol(t_sol_ms, 1.0), "score": None, "hw": "B200",
            "unscored": "measured on the CPU: T_SOL is the bound on B200"}


def test_rows_that_did_not_pass_carry_their_reason_and_the_workloads_bound():
    traces = [make_trace("rmsnorm", "torch", "w0", sol=unscored(0.004), hardware="cpu"),
              make_trace("rmsnorm", "triton", "w0", status="SKIPPED", log="Triton's CPU interpreter computes "
                         "bfloat16 arithmetic wrongly; this solution can only be judged on a GPU"),
              make_trace("rmsnorm", "broken", "w0", status="COMPILE_ERROR", log="k.py: syntax error at line 3")]
    text = render(workload_table(traces))
    rows = {line.split("│")[2].strip(): line for line in text.splitlines() if line.startswith("│")}
    assert "T_SOL ms (B200)" in text and all("0.004" in row for row in rows.values())  # the bound is the workload's
    assert "Triton's CPU interpreter computes bfloat16" in rows["triton"]
    assert "syntax error at line 3" in rows["broken"] and "reason" in text


def test_why_section_groups_workloads_that_share_a_reason():
    traces = [make_trace("p", "k", f"w{i}", status="SKIPPED", log="cuda_cpp solutions need a CUDA GPU")
              for i in range(3)]
    traces.append(make_trace("p", "bad", "w0", status="RUNTIME_ERROR", axes={"n": 7},
                             log="the solution raised:\nTraceback (most recent call last):\n  File \"k.py\", line 2, "
                                 "in run\n    return 1 / 0\nZeroDivisionError: division by zero"))
    text = render(failures_section(traces))
    assert text.startswith("Why: 1 failed, 3 skipped")
    assert "RUNTIME_ERROR bad on p (n=7): the solution raised: ZeroDivisionError: division by zero" in text
    assert "return 1 / 0" in text  # the failing line
    assert "SKIPPED k on p (3 workloads): cuda_cpp solutions need a CUDA GPU" in text
    assert text.index("RUNTIME_ERROR") < text.index("SKIPPED")  # failures first
    assert failures_section([make_trace()]) is None


def test_the_note_says_which_gpu_and_why_cpu_times_are_not_scored():
    assert sol_note([make_trace(sol=sol(0.1, 1.0))]) is None  # a GPU run's scores need no note
    note = sol_note([make_trace(sol=unscored(0.1))])
    assert "bound on B200" in note and "CPU latencies are not scored" in note


def cpu_run_traces() -> list[Trace]:
    """What a CPU run of the shipped solutions gives: long names, axes, skipped rows with long reasons."""
    traces = []
    for problem, solution in (("rmsnorm_h4096", "rmsnorm_cuda_vectorized"), ("softmax_online_v8192", "softmax_triton")):
        for batch in (8, 4096):
            traces.append(make_trace(problem, solution, f"{problem}{batch}", status="SKIPPED", axes={"batch_size": batch},
                                     log="Triton's CPU interpreter computes bfloat16 arithmetic wrongly; this "
                                         "solution can only be judged on a GPU", sol=unscored(0.004)))
            traces.append(make_trace(problem, "torch_reference_eager", f"{problem}{batch}", axes={"batch_size": batch},
                                     sol=unscored(0.004), hardware="cpu"))
    return traces


@pytest.mark.parametrize("width", [80, 120, 160])
def test_tables_fit_the_terminal_with_no_cell_cut_short(width):
    console = Console(record=True, width=width, color_system=None, file=io.StringIO())
    print_results(console, cpu_run_traces())
    text = console.export_text()
    assert "…" not in text  # rich cuts a squeezed cell with an ellipsis
    assert max(len(line) for line in text.splitlines()) <= width
    names = ("rmsnorm_h4096", "rmsnorm_cuda_vectorized", "softmax_online_v8192", "torch_reference_eager",
             "batch_size=4096", "SKIPPED", "PASSED")
    if width >= 120:
        for name in names:
            assert name in text, name  # every name whole, on one line
    else:  # 80 columns: a long name wraps inside its cell, every letter of it shown
        assert "│ rmsnorm_h409 │" in text and "│ 6            │" in text
    if width < 160:
        assert "left out to fit" in text  # and the caption says which columns a wider terminal shows
    # the reason is still said, in the Why section (wrapped at the terminal's width)
    assert "Triton's CPU interpreter computes bfloat16 arithmetic wrongly" in " ".join(text.split())


def test_a_wide_terminal_keeps_every_column():
    console = Console(record=True, width=PIPED_WIDTH, color_system=None, file=io.StringIO())
    print_results(console, cpu_run_traces())
    text = console.export_text()
    assert "left out" not in text
    for header in ("±ci %", "max abs err", "reason", "SOL score"):
        assert header in text


def test_the_note_names_hw_as_the_reason_when_hw_was_given():
    note = sol_note([make_trace(sol={**unscored(0.1), "hw": "H100_SXM", "hw_chosen_by": "--hw"})])
    assert "bound on H100_SXM, the GPU named with --hw" in note and "no --hw" not in note
    note = sol_note([make_trace(sol={**unscored(0.1), "hw_chosen_by": "target_hardware"})])
    assert "bound on B200 (the solution's target GPU" in note and "no --hw" in note


def test_a_speedup_beyond_the_noise_is_coloured_in_the_terminal_and_one_inside_it_is_not():
    from solbench.report.table import speedup_text

    assert speedup_text(make_trace(latency_ms=1.0, reference_ms=1.12, rel_ci=0.02)) == "[green]1.12x[/green]"
    assert speedup_text(make_trace(latency_ms=1.0, reference_ms=0.5, rel_ci=0.02)) == "[red]0.50x[/red]"
    assert speedup_text(make_trace(latency_ms=1.0, reference_ms=1.01, rel_ci=0.02)) == "1.01x"  # within 2% noise
    assert speedup_text(make_trace(latency_ms=1.0, reference_ms=1.5, rel_ci=None)) == "1.50x"  # no interval
