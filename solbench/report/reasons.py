"""Why a workload failed or was skipped, in one line, from what its trace already says.

Traces carry the full story (the log, the correctness message, warnings); tables, the HTML report and
the pytest plugin need the one line a user reads first: "syntax error at line 3", "cuda_cpp solutions
need a CUDA GPU", "the solution raised: ValueError: ...". No message is invented here: the line is
picked from the trace, so the words stay those of the check that decided.
"""

from __future__ import annotations

from solbench.spec.trace import Status, Trace

TRACEBACK_HEAD = "Traceback (most recent call last):"


def _exception_line(lines: list[str]) -> str | None:
    """The `Type: message` line that ends the last Python traceback in `lines`, if there is one."""
    if TRACEBACK_HEAD not in lines:
        return None
    start = len(lines) - 1 - lines[::-1].index(TRACEBACK_HEAD)
    for line in lines[start + 1:]:
        if not line.startswith((" ", "\t")) and line.strip():
            return line.strip()
    return None


def reason(trace: Trace) -> str:
    """One line on why this workload did not pass ("" for a pass): the log's first line, with the
    exception of a traceback appended; else the correctness message; else the first warning."""
    if trace.status == Status.PASSED:
        return ""
    evaluation = trace.evaluation
    lines = [line.rstrip() for line in (evaluation.log or "").splitlines()]
    lines = [line for line in lines if line.strip() and not line.lstrip().startswith("[... ")]
    if lines:
        head = lines[0].strip()
        exception = _exception_line(lines)
        if head == TRACEBACK_HEAD:
            return exception or head
        if exception and exception not in head:
            return f"{head.rstrip(':')}: {exception}"
        return head
    if evaluation.correctness is not None and evaluation.correctness.message:
        return evaluation.correctness.message
    if evaluation.warnings:
        return evaluation.warnings[0]
    return f"{trace.status.value} (the trace gives no reason)"


def log_tail(trace: Trace, lines: int = 4) -> list[str]:
    """The last lines of the log (where a traceback ends: the failing line of the solution), for a failure
    section under a table; Python's ^^^ markers left out."""
    kept = [line.rstrip() for line in (trace.evaluation.log or "").splitlines()
            if line.strip() and line.strip().strip("^~") != ""]
    return kept[-lines:] if len(kept) > 1 else []


def unscored_bounds(traces: list[Trace]) -> str | None:
    """One sentence: on which GPU the T_SOL of unscored (CPU) traces is, and why that GPU, as the traces
    record it (`hw_chosen_by`: --hw, else the solution's target GPU); None when every trace is scored."""
    unscored = [t.evaluation.sol for t in traces if (t.evaluation.sol or {}).get("unscored")]
    if not unscored:
        return None
    hardware = ", ".join(sorted({str(sol.get("hw")) for sol in unscored}))
    chosen_by = {sol.get("hw_chosen_by") for sol in unscored}
    if chosen_by == {"--hw"}:
        return f"T_SOL is each workload's bound on {hardware}, the GPU named with --hw: this run has no GPU."
    if chosen_by == {"target_hardware"}:
        return (f"T_SOL is each workload's bound on {hardware} (the solution's target GPU; B200 where a solution "
                f"declares none), because this run has no GPU and no --hw.")
    return f"T_SOL is each workload's bound on {hardware} (named with --hw or the solution's target GPU): no GPU ran these."
