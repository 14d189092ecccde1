"""What one timed block is asked for, by the call's length: its CI target over the rounds, its argument slots."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from solbench.orchestrator.timed import (
    CPU_INTERLEAVE_BELOW_S,
    CPU_ROUNDS,
    GPU_ROUNDS,
    block_timing,
    later_round_timing,
    least_for_ci,
    slots_for,
    timing_rounds,
)
from solbench.timing.config import TimingConfig
from solbench.timing.stats import median_ci_ranks


@pytest.mark.parametrize("call_s, slots", [(0.0, 8), (20e-6, 8), (0.99e-3, 8), (1e-3, 4), (9.9e-3, 4),
                                           (10e-3, 2), (0.065, 2), (3.0, 2)])
def test_longer_calls_rotate_fewer_slots_but_never_one(call_s, slots):
    assert slots_for(call_s) == slots


def test_a_block_of_long_calls_shares_the_ci_target_with_the_other_rounds():
    timing = TimingConfig(target_rel_ci=0.01, long_call_ms=1.0)
    assert block_timing(timing, 2, 5e-3, "cuda:0").target_rel_ci == pytest.approx(0.01 * math.sqrt(2))
    assert block_timing(timing, 4, 5e-3, "cuda:0").target_rel_ci == pytest.approx(0.02)
    assert block_timing(timing, 1, 5e-3, "cuda:0") == timing
    assert block_timing(timing, 2, 0.5e-3, "cuda:0").target_rel_ci == 0.01  # short calls: the whole target in every block


def test_cpu_short_calls_are_interleaved_in_more_rounds_sharing_one_blocks_budget():
    assert timing_rounds(None, "cuda:0", 1e-4) == GPU_ROUNDS == timing_rounds(None, "cuda:0", 1.0)
    assert timing_rounds(None, "cpu", 1e-4) == CPU_ROUNDS > GPU_ROUNDS
    assert timing_rounds(None, "cpu", CPU_INTERLEAVE_BELOW_S) == 1  # long calls span the host's episodes
    assert timing_rounds(1, "cpu", 1e-4) == 1 and timing_rounds(3, "cuda:1", 1e-4) == 3  # as asked
    cpu = TimingConfig.cpu()
    block = block_timing(cpu, 6, 1e-4, "cpu")
    assert block.max_time_s == pytest.approx(cpu.max_time_s / 6)
    assert block.short_block_ms == pytest.approx(cpu.short_block_ms / 6)
    assert (block.iters, block.short_call_iters) == (2, 2) and block.max_iters == 500
    assert block.target_rel_ci == cpu.target_rel_ci  # short calls keep the target
    assert block_timing(cpu, 1, 1e-4, "cpu") == cpu


@pytest.mark.parametrize("call_s", [1e-5, 5e-3, 0.065])
def test_gpu_rounds_share_the_workloads_floors_but_each_block_keeps_enough_calls_for_a_ci_and_its_caps(call_s):
    gpu = TimingConfig.cuda()
    block = block_timing(gpu, 2, call_s, "cuda:0")
    assert (block.iters, block.short_call_iters) == (6, 25)  # 10 -> 5 would leave a block without a 95% CI
    assert block.min_block_ms == gpu.min_block_ms / 2 and block.max_time_s == gpu.max_time_s
    assert block.max_iters == gpu.max_iters and block.warmup == gpu.warmup
    assert block.capped_iters == gpu.iters  # a block the power limit ends keeps the whole count
    assert least_for_ci(0.95) == 6 and median_ci_ranks(5, 0.95) is None and least_for_ci(0.9) == 5
    top = math.nextafter(1.0, 0.0)  # the highest level TimingConfig accepts
    assert median_ci_ranks(least_for_ci(top), top) is not None and median_ci_ranks(least_for_ci(top) - 1, top) is None
    four = block_timing(gpu, 4, call_s, "cuda:0")
    assert (four.iters, four.short_call_iters, four.min_block_ms) == (6, 13, gpu.min_block_ms / 4)
    assert block_timing(gpu, 1, call_s, "cuda:0") == gpu  # one round: the whole floors in its block
    fixed = replace(gpu, iters=3, adaptive=False)  # --iters 3 --no-adaptive: 3 per side, rounded up to the rounds
    assert block_timing(fixed, 2, call_s, "cuda:0").iters == 2


@pytest.mark.parametrize("timing", [TimingConfig.cpu(), TimingConfig.cuda()])
def test_later_rounds_warm_up_with_one_call_for_as_long_and_as_the_clock_asks(timing):
    later = later_round_timing(timing)
    assert later.warmup == 1 and later.min_warmup_ms == timing.min_warmup_ms > 0
    assert later.clock_warmup == timing.clock_warmup and replace(later, warmup=timing.warmup) == timing
