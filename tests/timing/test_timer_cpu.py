"""The CPU timer protocol, adaptive stopping and tamper detection.

Timing asserts are against synthetic runs with generous bounds (a busy 2-core CI machine can
preempt any single iteration), or go through medians, which a few preemptions do not move.
"""

from __future__ import annotations

import gc
import random
import time
from dataclasses import replace

import pytest
import torch

from solbench.timing import call_loop, captured, timer
from solbench.timing.config import TimingConfig
from solbench.timing.l2_flush import L2Flusher
from solbench.timing.telemetry import Telemetry
from solbench.timing.timer import (
    STOP_CI,
    STOP_FIXED,
    STOP_MAX_ITERS,
    STOP_MAX_TIME,
    STOP_POWER_CAP,
    events_exceed_wall,
    integrity_violations,
    next_batch_size,
    time_iterations,
)
from tests.timing.fake_nvml import FakeGpu, FakeNvml

FAST = dict(l2_flush=False, min_warmup_ms=0.0, warmup=2)


def spin_ms(ms: float) -> None:
    """Busy-wait (sleep granularity is too coarse and too noisy for sub-ms amounts)."""
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def test_prepare_is_outside_the_window():
    result = time_iterations(lambda i: None, lambda i: time.sleep(0.02), "cpu",
                             TimingConfig.cpu(iters=10, adaptive=False, **FAST))
    assert len(result.samples_ms) == 10
    assert result.stats.median_ms < 5.0  # 20 ms of prepare would dominate every sample
    assert result.wall_s >= 10 * 0.02  # ...but it did happen, inside the block's wall time


def test_call_order_prepare_flush_run_and_indices():
    flusher = L2Flusher("cpu", size_bytes=4096)
    log = []
    config = TimingConfig.cpu(iters=5, adaptive=False, warmup=3, min_warmup_ms=0.0, l2_flush=True)  # off by default
    result = time_iterations(lambda i: log.append(("run", i, flusher.flush_count)),
                             lambda i: log.append(("prepare", i, flusher.flush_count)), "cpu", config,
                             flusher=flusher)
    assert result.warmup_done == 3
    calls = result.warmup_done + len(result.samples_ms)
    assert [e[1] for e in log] == [i for i in range(calls) for _ in range(2)]  # i counts every call
    for k in range(0, len(log), 2):
        (p, i, flushes_before), (r, j, flushes_at_run) = log[k], log[k + 1]
        assert (p, r, i) == ("prepare", "run", j)
        assert flushes_at_run == flushes_before + 1  # exactly one flush, after prepare, before run


def test_warmup_runs_at_least_warmup_calls_and_min_time():
    config = TimingConfig.cpu(iters=3, adaptive=False, warmup=4, min_warmup_ms=30.0, l2_flush=False)
    calls = []
    result = time_iterations(lambda i: calls.append(i) or spin_ms(1.0), None, "cpu", config)
    assert result.warmup_done >= 4
    assert result.warmup_s >= 0.030  # 4 calls of 1 ms would take ~4 ms: min_warmup_ms extended it
    assert len(calls) == result.warmup_done + 3
    assert result.stats.warmup == result.warmup_done and result.clock_warmup == "off"


def test_fixed_iterations_when_not_adaptive():
    result = time_iterations(lambda i: None, None, "cpu", TimingConfig.cpu(iters=17, adaptive=False, **FAST))
    assert len(result.samples_ms) == 17 and result.stop_reason == STOP_FIXED
    assert result.stats.method == "cpu_clock" and result.stats.n == 17


def test_adaptive_stops_early_on_tight_samples():
    config = TimingConfig.cpu(iters=20, max_iters=2000, target_rel_ci=0.05, max_time_s=30.0, short_block_ms=0.0,
                              **FAST)
    result = time_iterations(lambda i: spin_ms(0.3), None, "cpu", config)
    assert result.stop_reason == STOP_CI
    assert len(result.samples_ms) < 200
    assert result.stats.rel_ci_halfwidth <= 0.05 and "wide_ci" not in result.stats.flags


def test_adaptive_runs_to_the_cap_on_noisy_samples():
    rng = random.Random(0)
    config = TimingConfig.cpu(iters=20, max_iters=60, target_rel_ci=0.001, max_time_s=30.0, **FAST)
    result = time_iterations(lambda i: spin_ms(rng.uniform(0.05, 1.0)), None, "cpu", config)
    assert result.stop_reason == STOP_MAX_ITERS and len(result.samples_ms) == 60
    assert "wide_ci" in result.stats.flags


def test_adaptive_respects_the_time_budget():
    rng = random.Random(1)
    config = TimingConfig.cpu(iters=10, max_iters=100_000, target_rel_ci=0.0001, max_time_s=0.25, **FAST)
    result = time_iterations(lambda i: spin_ms(rng.uniform(0.5, 1.5)), None, "cpu", config)
    assert result.stop_reason == STOP_MAX_TIME
    assert 10 <= len(result.samples_ms) < 1000
    assert result.wall_s < 2.0  # 0.25 s budget, generous for a slow machine


def test_minimum_iterations_run_even_past_the_budget():
    config = TimingConfig.cpu(iters=5, max_iters=100, target_rel_ci=1e-6, max_time_s=0.001, **FAST)
    result = time_iterations(lambda i: spin_ms(1.0), None, "cpu", config)
    assert len(result.samples_ms) == 5 and result.stop_reason == STOP_MAX_TIME


def test_next_batch_size_policy():
    c = TimingConfig(iters=50, max_iters=400, max_time_s=10.0, target_rel_ci=0.01, batch_min=10)
    assert next_batch_size(0, 0.0, c, None) == (50, None)
    assert next_batch_size(50, 1.0, c, 0.005) == (0, STOP_CI)
    assert next_batch_size(50, 1.0, c, 0.02) == (12, None)  # a quarter of what we have
    assert next_batch_size(20, 1.0, c, 0.02) == (10, None)  # never below batch_min
    assert next_batch_size(398, 1.0, c, 0.02) == (2, None)  # never past max_iters
    assert next_batch_size(400, 1.0, c, 0.02) == (0, STOP_MAX_ITERS)
    assert next_batch_size(100, 9.95, c, 0.02) == (0, STOP_MAX_TIME)  # 0.05 s left < one 0.0995 s iteration
    assert next_batch_size(100, 9.0, c, 0.02) == (11, None)  # shrunk to what fits in the 1 s left
    assert next_batch_size(100, 1.0, c, None) == (25, None)  # no CI yet: keep going
    fixed = TimingConfig(adaptive=False)
    assert next_batch_size(50, 1.0, fixed, 0.5) == (0, STOP_FIXED)


def test_the_block_floor_depends_on_the_call_length():
    c = TimingConfig(iters=10, short_call_iters=50, long_call_ms=1.0, min_block_ms=200.0, batch_min=10, max_time_s=10.0)
    # short calls (10 x 0.02 ms): a tight CI is not enough before 50 samples
    assert next_batch_size(10, 0.1, c, 0.001, timed_ms=0.2) == (40, None)
    assert next_batch_size(50, 0.5, c, 0.001, timed_ms=1.0) == (0, STOP_CI)
    # long calls (10 x 5 ms = 50 ms): go on until 200 ms of device time, then the CI decides
    assert next_batch_size(10, 0.06, c, 0.001, timed_ms=50.0) == (30, None)
    assert next_batch_size(40, 0.24, c, 0.001, timed_ms=200.0) == (0, STOP_CI)
    assert next_batch_size(40, 0.24, c, 0.05, timed_ms=200.0) == (10, None)  # CI still wide: keep going
    # the time budget still ends a block of very long calls early
    assert next_batch_size(10, 9.99, c, 0.001, timed_ms=10_000.0 / 10 * 10) == (0, STOP_CI)
    assert next_batch_size(2, 9.99, TimingConfig(iters=2, max_time_s=10.0), 0.5, timed_ms=9000.0) == (0, STOP_MAX_TIME)


def test_long_calls_at_the_power_limit_stop_at_their_floor():
    c = TimingConfig(iters=10, short_call_iters=50, long_call_ms=1.0, min_block_ms=200.0, batch_min=10, max_time_s=10.0)
    asked = []

    def capped(answer):
        return lambda: asked.append(answer) or answer

    # floor met, CI still wide: a capped board ends the block, an uncapped one keeps going
    assert next_batch_size(40, 0.24, c, 0.05, timed_ms=200.0, capped=capped(True)) == (0, STOP_POWER_CAP)
    assert next_batch_size(40, 0.24, c, 0.05, timed_ms=200.0, capped=capped(False)) == (10, None)
    asked.clear()
    # not asked below the floor, nor once the CI target is met, nor for short calls
    assert next_batch_size(10, 0.06, c, 0.05, timed_ms=50.0, capped=capped(True)) == (30, None)
    assert next_batch_size(40, 0.24, c, 0.001, timed_ms=200.0, capped=capped(True)) == (0, STOP_CI)
    assert next_batch_size(60, 0.5, c, 0.05, timed_ms=1.2, capped=capped(True)) == (15, None)
    assert asked == []
    # a round's block with the workload's floor shared: a capped board ends it only at `capped_iters` calls,
    # asked for exactly (not a whole adaptive batch); an uncapped one goes on by its CI as before
    shared = replace(c, iters=6, min_block_ms=100.0, capped_iters=10)
    assert next_batch_size(6, 0.24, shared, 0.05, timed_ms=180.0, capped=capped(True)) == (4, None)
    assert next_batch_size(10, 0.4, shared, 0.05, timed_ms=300.0, capped=capped(True)) == (0, STOP_POWER_CAP)
    assert next_batch_size(6, 0.24, shared, 0.05, timed_ms=180.0, capped=capped(False)) == (10, None)
    assert next_batch_size(6, 0.24, shared, 0.001, timed_ms=180.0, capped=capped(True)) == (0, STOP_CI)
    with pytest.raises(ValueError):
        replace(c, capped_iters=-1)


@pytest.mark.parametrize("mask_before, mask_during, stops", [(0x4, 0x4, True), (0x0, 0x4, True), (0x40, 0x40, True),
                                                              (0x0, 0x0, False), (0x10, 0x10, False)])
def test_a_block_on_a_capped_board_stops_at_its_floor_and_says_so(mask_before, mask_during, stops):
    """Through the timer, with NVML faked (the boundary): the cap read before the block or while it runs."""
    gpu = FakeGpu(throttle_mask=mask_before)
    nvml = FakeNvml([gpu])
    telemetry = Telemetry(0, nvml)

    def run(i):
        if "throttle_reasons" in nvml.names_called():  # the block's first reading is taken: the cap engages
            gpu.throttle_mask = mask_during
        spin_ms(1.5)

    config = TimingConfig.cpu(iters=10, max_iters=30, target_rel_ci=1e-9, max_time_s=60.0, long_call_ms=1.0, **FAST)
    result = time_iterations(run, None, "cpu", config, telemetry=telemetry)
    if stops:
        assert (result.stop_reason, len(result.samples_ms)) == (STOP_POWER_CAP, 10)
        assert "power_capped" in result.flags
    else:
        assert (result.stop_reason, len(result.samples_ms)) == (STOP_MAX_ITERS, 30)
        assert "power_capped" not in result.flags
    gpu.throttle_mask = mask_before
    off = time_iterations(run, None, "cpu", replace(config, power_cap_stop=False), telemetry=telemetry)
    assert (off.stop_reason, len(off.samples_ms)) == (STOP_MAX_ITERS, 30)


def test_gc_is_off_inside_and_restored_after():
    seen = []
    config = TimingConfig.cpu(iters=3, adaptive=False, **FAST)
    assert gc.isenabled()
    time_iterations(lambda i: seen.append(gc.isenabled()), None, "cpu", config)
    assert seen and not any(seen) and gc.isenabled()
    seen.clear()
    time_iterations(lambda i: seen.append(gc.isenabled()), None, "cpu", TimingConfig.cpu(gc_off=False, iters=3, **FAST))
    assert all(seen)


def test_gc_restored_when_run_raises():
    def boom(i):
        raise RuntimeError("kernel failed")

    with pytest.raises(RuntimeError, match="kernel failed"):
        time_iterations(boom, None, "cpu", TimingConfig.cpu(**FAST))
    assert gc.isenabled()


def test_result_wall_and_event_totals_are_consistent():
    result = time_iterations(lambda i: spin_ms(0.5), None, "cpu", TimingConfig.cpu(iters=20, adaptive=False, **FAST))
    assert result.events_total_ms == pytest.approx(sum(result.samples_ms))
    assert result.events_total_ms <= result.wall_s * 1e3
    assert "events_exceed_wall" not in result.flags
    assert result.clocks_before is None and result.energy_mj_per_call is None


def test_events_exceed_wall_rule():
    c = TimingConfig(wall_margin_rel=0.02, wall_margin_ms=0.05)
    assert not events_exceed_wall(100.0, 0.1, c)
    assert not events_exceed_wall(102.0, 0.1, c)
    assert events_exceed_wall(102.1, 0.1, c)
    assert events_exceed_wall(1.0, 0.0, c)


def test_integrity_clean_at_start():
    assert integrity_violations() == []


def test_integrity_detects_replaced_perf_counter_and_timer_ignores_it(monkeypatch):
    monkeypatch.setattr(time, "perf_counter_ns", lambda: 0)
    assert integrity_violations() == ["time.perf_counter_ns"]
    # the timer keeps its own reference: samples are still real
    result = time_iterations(lambda i: spin_ms(0.3), None, "cpu", TimingConfig.cpu(iters=6, adaptive=False, **FAST))
    assert result.stats.median_ms >= 0.3
    assert "timing_functions_replaced" in result.flags


def test_replacement_during_the_block_is_flagged(monkeypatch):
    def run(i):
        if i == 3:
            monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)

    result = time_iterations(run, None, "cpu", TimingConfig.cpu(iters=6, adaptive=False, **FAST))
    assert "timing_functions_replaced" in result.flags
    monkeypatch.undo()
    clean = time_iterations(lambda i: None, None, "cpu", TimingConfig.cpu(iters=6, adaptive=False, **FAST))
    assert "timing_functions_replaced" not in clean.flags


def test_integrity_detects_replaced_cuda_event_and_methods(monkeypatch):
    class FakeEvent(torch.cuda.Event):
        pass

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    assert "torch.cuda.Event" in integrity_violations()
    monkeypatch.undo()
    monkeypatch.setattr(torch.cuda.Event, "elapsed_time", lambda self, end: 0.001)
    assert integrity_violations() == ["torch.cuda.Event.elapsed_time"]
    monkeypatch.undo()
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(gc, "disable", lambda: None)
    assert set(integrity_violations()) == {"torch.cuda.synchronize", "gc.disable"}
    monkeypatch.undo()
    assert integrity_violations() == []


def test_integrity_detects_deleted_attribute(monkeypatch):
    monkeypatch.delattr(torch.cuda.Event, "record")
    assert "torch.cuda.Event.record" in integrity_violations()


def test_default_config_follows_device():
    result = time_iterations(lambda i: None, None, "cpu", None)
    assert result.stats.method == "cpu_clock" and len(result.samples_ms) >= TimingConfig.cpu().iters


def test_timer_module_captured_originals():
    assert timer._perf_counter_ns is captured._perf_counter_ns is time.perf_counter_ns
    assert captured._Event is torch.cuda.Event


def test_launch_hold_grows_to_cover_host_launches_and_never_shrinks():
    hold = call_loop.LaunchHold(max_ms=2.0, max_sm_mhz=1000)
    assert hold.ms == pytest.approx(call_loop.HOLD_MIN_MS)
    hold.grow([0.1] * 9 + [5.0])  # the p90 of ten samples is the largest: 5 ms, beyond the cap
    assert hold.ms == pytest.approx(2.0)
    hold.grow([0.01] * 20)
    assert hold.ms == pytest.approx(2.0)  # never shrinks within a block
    fresh = call_loop.LaunchHold(max_ms=2.0, max_sm_mhz=1000)
    fresh.grow([0.2] * 20)
    assert fresh.ms == pytest.approx(call_loop.HOLD_FACTOR * 0.2 + call_loop.HOLD_MIN_MS)
    assert fresh._cycles == int(fresh.ms * 1000 * 1000)  # cycles at the maximum SM clock: errs long


def test_launch_hold_without_nvml_assumes_a_clock_above_any_gpu():
    hold = call_loop.LaunchHold(max_ms=1.0, max_sm_mhz=None)
    assert hold.cycles_per_ms == 1000 * call_loop.ASSUMED_MAX_SM_MHZ >= 1000 * 2100


def test_cpu_timing_reports_no_host_launch_figures():
    result = time_iterations(lambda i: None, None, "cpu", TimingConfig.cpu(iters=5, adaptive=False))
    assert result.host_ms is None and result.hold_ms == 0.0 and result.exposed == 0


def spin_cpu_ms(ms: float) -> None:
    """Busy for `ms` of this thread's CPU time (however long a loaded machine makes that in wall time)."""
    end = time.thread_time() + ms / 1e3
    while time.thread_time() < end:
        pass


def test_cpu_samples_leave_out_time_without_a_core_and_say_so():
    """A call that holds no core (here: asleep, as a preempted call waits) is not charged for it: CPU samples
    are the process's CPU time (docs/timing.md, "CPU timings"), and the block is flagged `cpu_contended`."""
    config = TimingConfig.cpu(iters=5, adaptive=False, **FAST)
    result = time_iterations(lambda i: time.sleep(0.02), None, "cpu", config)
    assert result.stats.median_ms < 10.0  # 20 ms asleep per call, a few us of CPU
    assert timer.FLAG_CPU_CONTENDED in result.stats.flags


def test_cpu_samples_count_work_on_the_call_s_other_threads():
    """Work a call hands to another thread of the process and waits for is the call's, and is counted."""
    import threading

    def run(i):
        helper = threading.Thread(target=spin_cpu_ms, args=(20.0,))
        helper.start()
        helper.join()

    result = time_iterations(run, None, "cpu", TimingConfig.cpu(iters=5, adaptive=False, **FAST))
    assert result.stats.median_ms >= 15.0


def test_short_calls_also_fill_short_block_ms_when_asked():
    """CPU: a block of short calls lasts some time, not just a count (the host's speed changes in episodes)."""
    c = TimingConfig(iters=3, short_call_iters=3, long_call_ms=1.0, short_block_ms=15.0, batch_min=10,
                     max_time_s=10.0, max_iters=10_000)
    # 3 calls of 0.03 ms: a tight CI is not enough before 15 ms of calls (497 more), then the CI decides
    assert next_batch_size(3, 0.001, c, 0.001, timed_ms=0.09) == (497, None)
    assert next_batch_size(500, 0.05, c, 0.001, timed_ms=15.0) == (0, STOP_CI)
    # the count floor stays the larger one where calls are longer; without short_block_ms nothing changes
    assert next_batch_size(3, 0.01, replace(c, short_call_iters=50), 0.001, timed_ms=2.7) == (47, None)
    assert next_batch_size(3, 0.001, replace(c, short_block_ms=0.0), 0.001, timed_ms=0.09) == (0, STOP_CI)
    # and the time budget still ends it
    assert next_batch_size(3, 9.999, c, 0.001, timed_ms=0.09) == (0, STOP_MAX_TIME)


def _touch_fresh_memory(pages: int = 256) -> None:
    """Map memory no call has used and write one byte of each page: `pages` page faults."""
    import mmap

    mapped = mmap.mmap(-1, pages * mmap.PAGESIZE)
    for offset in range(0, len(mapped), mmap.PAGESIZE):
        mapped[offset] = 1
    mapped.close()


def test_cpu_warm_up_goes_on_until_calls_stop_page_faulting():
    """A call whose memory is still growing (the first 6 calls here fault pages in) is warming up: warm-up
    goes on until STEADY_CALLS calls in a row took no fault, so no timed sample pays for the growth."""
    calls = []

    def run(i):
        calls.append(i)
        if len(calls) <= 6:
            _touch_fresh_memory()

    config = TimingConfig.cpu(iters=5, adaptive=False, **FAST)
    result = time_iterations(run, None, "cpu", config)
    assert result.warmup_done >= 6 + timer.STEADY_CALLS
    assert timer.FLAG_CPU_PAGE_FAULTS not in result.stats.flags
    off = time_iterations(lambda i: _touch_fresh_memory(), None, "cpu", replace(config, memory_warmup_timeout_s=0.0))
    assert off.warmup_done == config.warmup  # off: the usual count


def test_a_call_that_always_page_faults_is_flagged_after_a_bounded_warm_up():
    config = TimingConfig.cpu(iters=5, adaptive=False, **dict(FAST, memory_warmup_timeout_s=0.05))
    result = time_iterations(lambda i: _touch_fresh_memory(), None, "cpu", config)  # ends: the timeout bounds it
    assert timer.FLAG_CPU_PAGE_FAULTS in result.stats.flags and len(result.samples_ms) == 5
