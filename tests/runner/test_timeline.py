"""The run timeline (`orchestrator.timeline`): stages noted once (or last), read back from the printed line,
and every stage of a local run noted by `run_jobs` and `solbench run --timeline`."""

from __future__ import annotations

import time

from solbench.orchestrator.jobs import make_job
from solbench.orchestrator.scheduler import run_jobs
from solbench.orchestrator.timeline import LINE_PREFIX, STAGES, RunTimeline, parse_line, process_started
from solbench.spec.problem import load_problem
from solbench.spec.trace import Status
from tests.test_cli import FAST, solbench


def test_marks_keep_the_first_time_unless_last_and_the_line_reads_back():
    timeline = RunTimeline()
    timeline.mark("cli")
    first = timeline.marks["cli"]
    timeline.mark("cli")
    assert timeline.marks["cli"] == first
    timeline.mark("last_trace", last=True)
    earlier = timeline.marks["last_trace"]
    timeline.mark("last_trace", last=True)
    assert timeline.marks["last_trace"] >= earlier
    seconds = timeline.seconds()
    assert list(seconds) == ["cli", "last_trace"] and all(s >= 0 for s in seconds.values())
    line = timeline.line()
    assert line.startswith(LINE_PREFIX)
    assert parse_line(f"noise\n{line}\nmore noise") == {k: round(v, 2) for k, v in seconds.items()}
    assert parse_line("no timeline here") is None


def test_the_process_start_is_before_now():
    assert process_started() <= time.monotonic()


def test_run_jobs_notes_the_run_stages(problem_dir, fast_config):
    timeline = RunTimeline()
    traces = run_jobs([make_job(load_problem(problem_dir), None, 1)], fast_config, ["cpu"], timeline=timeline)
    assert [t.evaluation.status for t in traces] == [Status.PASSED]
    seconds = timeline.seconds()
    assert {"first_spawn", "first_trace", "last_trace", "closed"} <= set(seconds)
    assert seconds["first_spawn"] <= seconds["first_trace"] <= seconds["last_trace"] <= seconds["closed"]


def test_cli_timeline_prints_every_stage_in_order(problem_dir):
    result = solbench("run", str(problem_dir), "--json", "--timeline", *FAST)
    assert result.returncode == 0, result.stderr
    seconds = parse_line(result.stderr)
    assert seconds is not None and set(seconds) == set(STAGES), result.stderr
    order = ["cli", "devices", "jobs", "first_trace", "last_trace", "closed", "report", "exit"]
    assert [seconds[s] for s in order] == sorted(seconds[s] for s in order)
    assert seconds["first_spawn"] <= seconds["first_trace"]
