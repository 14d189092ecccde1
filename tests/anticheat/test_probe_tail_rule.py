"""The escaped-work probe's tail rule (no CUPTI), on recorded figures: a slow host is not escaped work,
work left running is, and tails that would accuse get a second round of calls, a pause later, before
the verdict: both rounds must accuse."""

from __future__ import annotations

import time

from solbench.worker.probe import (
    CONFIRM_PAUSE_S,
    MIN_PROBE_CALLS,
    PROBE_CALLS,
    TAIL_FLOOR_MS,
    EscapedWorkProbe,
    ProbeResult,
)


def result(tails, idles, event_ms=0.02) -> ProbeResult:
    return ProbeResult(event_ms=[event_ms] * len(tails), tail_ms=list(tails), idle_ms=list(idles))


def test_a_host_whose_every_synchronize_is_slow_is_not_accused():
    # any synchronize slow (a loaded host): over the floor, but the empty one right after costs the same
    f = TAIL_FLOOR_MS
    slow_host = result([1.2 * f, 1.16 * f, 1.28 * f, 1.22 * f, 1.18 * f], [1.14 * f, 1.2 * f, 1.24 * f, 1.16 * f, 1.2 * f])
    assert slow_host.verdict() is None
    assert result([1.2 * f] * 5, [0.0] * 5).verdict() is not None  # the same tails with no baseline do accuse


def test_work_left_running_after_the_end_event_is_accused_whatever_the_host_costs():
    escaped = result([0.45, 0.47, 0.44, 0.46, 0.45], [0.030, 0.055, 0.020, 0.040, 0.035])
    verdict = escaped.verdict()
    assert verdict is not None and "kept running" in verdict and "median of 5 calls" in verdict
    # beyond the floor, in proportion to the call: a 2 ms call may leave 0.4 ms of driver work, not 0.6 ms
    assert result([0.43] * 5, [0.03] * 5, event_ms=2.0).verdict() is None
    assert result([0.63] * 5, [0.03] * 5, event_ms=2.0).verdict() is not None


def test_one_slow_moment_does_not_decide_the_median():
    assert result([0.01, 0.9, 0.01, 0.02, 0.01], [0.01] * 5).verdict() is None
    assert result([0.01, 0.9, 0.8, 0.7, 0.01], [0.01] * 5).verdict() is not None


def test_records_without_a_baseline_still_read_the_raw_tail():
    old = ProbeResult(event_ms=[0.02] * 5, tail_ms=[TAIL_FLOOR_MS * 4] * 5)  # idle_ms absent
    assert old.verdict() is not None
    assert old.to_dict()["idle_ms"] == []


def drive(probe: EscapedWorkProbe, tails, idle=0.01, seconds_per_call=0.0) -> int:
    """Make probe calls as the timer does (its clock runs through the probe's pause), feeding the tails
    given; returns how many calls were made."""
    made, warm, started = 0, 1 if probe.warm_call else 0, time.monotonic()
    while probe.wants_more(made, made * seconds_per_call + time.monotonic() - started):
        if made >= warm:
            probe.record(tails[made - warm], idle, 0.02)
        made += 1
    return made


def test_quiet_tails_get_the_usual_calls_and_accusing_tails_a_second_round():
    quiet = EscapedWorkProbe(use_cupti=False)
    assert drive(quiet, [0.01] * 20) == PROBE_CALLS + 1
    assert quiet.result.verdict() is None
    # a host that stalled for three of the five calls: the second round of five is quiet, the median of ten clears it
    stalled = EscapedWorkProbe(use_cupti=False)
    assert drive(stalled, [0.5, 0.5, 0.5, 0.01, 0.01] + [0.01] * 5) == 2 * PROBE_CALLS + 1
    assert stalled.result.verdict() is None
    # work escaping on every call still accuses after the second round
    escaping = EscapedWorkProbe(use_cupti=False)
    assert drive(escaping, [0.5] * 10) == 2 * PROBE_CALLS + 1
    assert escaping.result.verdict() is not None and "medians of 2 rounds" in escaping.result.verdict()
    assert escaping.result.rounds == [PROBE_CALLS, PROBE_CALLS]
    # a cheat that escapes on most calls is not saved by a quiet second round's few calls
    mostly = EscapedWorkProbe(use_cupti=False)
    drive(mostly, [0.5, 0.5, 0.5, 0.5, 0.01, 0.5, 0.5, 0.01, 0.5, 0.01])
    assert mostly.result.verdict() is not None


def test_the_second_round_keeps_its_minimum_under_the_budget():
    slow = EscapedWorkProbe(use_cupti=False, budget_s=1.0)
    made = drive(slow, [0.5] * 10, seconds_per_call=0.6)  # each call 0.6 s: the budget ends both rounds early
    assert made == 2 * MIN_PROBE_CALLS + 1  # the warm call, then the minimum in each round
    assert len(slow.result.tail_ms) == 2 * MIN_PROBE_CALLS and slow.result.verdict() is not None


def test_a_disturbance_that_outlasts_the_first_round_is_not_an_accusation():
    # every call of the first round slow (e.g. another process creating a CUDA context on the GPU), most of the
    # second quiet: the median of all ten (0.255 ms) would accuse; the second round's median does not
    rounds = ProbeResult(event_ms=[0.047] * 10, tail_ms=[0.5] * 5 + [0.5, 0.5, 0.01, 0.01, 0.01],
                         idle_ms=[0.01] * 10, rounds=[5, 5])
    assert rounds.tail_excess_ms() > TAIL_FLOOR_MS and rounds.verdict() is None
    probe = EscapedWorkProbe(use_cupti=False)
    started = time.monotonic()
    drive(probe, [0.5] * 5 + [0.5, 0.5, 0.01, 0.01, 0.01])
    assert time.monotonic() - started >= CONFIRM_PAUSE_S  # the second round came a pause later
    assert probe.result.rounds == [5, 5] and probe.result.verdict() is None


def test_an_accusation_carries_its_figures():
    escaped = result([0.45, 0.47], [0.030, 0.055])
    assert "0.450/0.030/0.020" in escaped.evidence() and "0.470/0.055/0.020" in escaped.evidence()


def with_cupti(tails, idles, event_ms=0.02, escaped=0.0, busy=0.015, span=0.018) -> ProbeResult:
    """Figures of calls whose CUPTI records look clean: the solution's process can switch CUPTI off."""
    figures = result(tails, idles, event_ms)
    n = len(tails)
    figures.cupti = "used"
    figures.escaped_ms, figures.busy_ms, figures.span_ms = [escaped] * n, [busy] * n, [span] * n
    return figures


def test_with_cupti_the_tail_still_accuses_work_cupti_did_not_see():
    hidden = with_cupti([0.45, 0.47, 0.44, 0.46, 0.45], [0.03] * 5)
    verdict = hidden.verdict()
    assert verdict is not None and "kept running" in verdict and "CUPTI saw none of it" in verdict
    assert with_cupti([0.03] * 5, [0.03] * 5).verdict() is None  # quiet tails, clean records: trusted
    # CUPTI's own accusation comes first, whatever the tail
    seen = with_cupti([0.03] * 5, [0.03] * 5, escaped=0.01)
    assert "outside its start and end events" in seen.verdict()


def test_with_cupti_accusing_tails_get_the_second_round_too():
    probe = EscapedWorkProbe(use_cupti=False)
    probe.result.cupti = "used"  # as after a CUPTI start; the records are read only at the end
    assert drive(probe, [0.5] * 10) == 2 * PROBE_CALLS + 1
    assert probe.result.rounds == [PROBE_CALLS, PROBE_CALLS]


class _Kinds:
    RUNTIME, DRIVER, CONCURRENT_KERNEL, MEMCPY, MEMSET = 1, 2, 3, 4, 5


class _RecordedCupti:
    """CUPTI's calls as the collector makes them, on a machine without a GPU: nothing is recorded but what
    the test hands the collector, and `finalize` is counted."""

    ActivityKind = _Kinds

    def __init__(self):
        self.finalized = 0

    def activity_register_callbacks(self, requested, completed):
        pass

    def activity_enable(self, kind):
        pass

    def activity_disable(self, kind):
        pass

    def activity_flush_all(self, flag):
        pass

    def finalize(self):
        self.finalized += 1


def test_calls_whose_markers_cupti_missed_are_read_by_the_tail_and_the_others_by_cupti():
    from solbench.worker.cupti_activity import ActivityCollector

    fake = _RecordedCupti()
    probe = EscapedWorkProbe(use_cupti=False)
    probe.collector, probe.result.cupti = ActivityCollector(fake), "used"
    probe.collector.start()
    # one call: its launch window 10..20 holds the call's kernel (correlation 7); the opening marker's
    # window 0..5 holds a kernel (correlation 6), the closing marker's window 25..30 none: taken over
    probe.collector.launches += [(2, 6), (12, 7)]
    probe.collector.work += [(100, 110, 6, 1), (120, 200, 7, 1)]
    probe.windows.append((0, 5, 10, 20, 25, 30))
    probe.record(0.45, 0.03, 0.02)
    result = probe.finish()
    assert result.cupti.startswith("incomplete") and "1 of 1 calls" in result.cupti
    assert fake.finalized == 1  # CUPTI is let go at the probe's end, so the next one registers afresh
    assert "kept running" in result.verdict()
    # the calls CUPTI did record are still read: switching it off around one call hides nothing in the others
    partly = with_cupti([0.03] * 5, [0.03] * 5, escaped=0.01)
    partly.cupti = result.cupti
    assert "outside its start and end events" in partly.verdict()
    # both markers there: CUPTI stays in use and nothing is finalized
    whole = EscapedWorkProbe(use_cupti=False)
    whole.collector, whole.result.cupti = ActivityCollector(fake), "used"
    whole.collector.start()
    whole.collector.launches += [(2, 6), (12, 7), (27, 8)]
    whole.collector.work += [(100, 110, 6, 1), (120, 200, 7, 1), (205, 210, 8, 1)]
    whole.windows.append((0, 5, 10, 20, 25, 30))
    whole.record(0.03, 0.03, 0.1)
    assert whole.finish().cupti == "used" and fake.finalized == 2
