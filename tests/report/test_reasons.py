"""One-line reasons picked from what a trace says (the log, the correctness message, warnings)."""

from __future__ import annotations

from solbench.report.reasons import log_tail, reason
from solbench.spec.trace import Correctness
from tests.report.conftest import make_trace

RAISED = """the solution raised:
Traceback (most recent call last):
  File "/x/solbench/worker/calls.py", line 137, in handle_call
    result = invoke(state, args, outputs)
             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/tmp/w/src/raises.py", line 3, in run
    raise ValueError("boom here")
ValueError: boom here
"""


def test_a_traceback_gives_its_exception_after_the_first_line():
    trace = make_trace(status="RUNTIME_ERROR", log=RAISED)
    assert reason(trace) == "the solution raised: ValueError: boom here"
    assert log_tail(trace)[-2:] == ['    raise ValueError("boom here")', "ValueError: boom here"]
    assert not any(set(line.strip()) <= {"^", "~"} for line in log_tail(trace))


def test_a_bare_traceback_gives_its_exception():
    log = "\n".join(RAISED.splitlines()[1:])
    assert reason(make_trace(status="RUNTIME_ERROR", log=log)) == "ValueError: boom here"


def test_the_first_line_otherwise_and_kept_output_markers_skipped():
    log = "[... 1200 bytes of output not kept ...]\nsyntax.py: syntax error at line 3: invalid syntax\nmore"
    assert reason(make_trace(status="COMPILE_ERROR", log=log)) == "syntax.py: syntax error at line 3: invalid syntax"
    skipped = make_trace(status="SKIPPED", log="cuda_cpp solutions need a CUDA GPU; this machine has none")
    assert reason(skipped) == "cuda_cpp solutions need a CUDA GPU; this machine has none"


def test_without_a_log_the_correctness_message_then_a_warning_then_the_status():
    trace = make_trace(status="INCORRECT_NUMERICAL", log="")
    trace.evaluation.log = ""
    trace.evaluation.correctness = Correctness(max_absolute_error=0.5, message="out: 64 of 64 elements exceed atol")
    assert reason(trace) == "out: 64 of 64 elements exceed atol"
    trace.evaluation.correctness = None
    trace.evaluation.warnings = ["the reference could not be timed"]
    assert reason(trace) == "the reference could not be timed"
    trace.evaluation.warnings = []
    assert reason(trace) == "INCORRECT_NUMERICAL (the trace gives no reason)"
    assert reason(make_trace()) == ""  # a pass has none
