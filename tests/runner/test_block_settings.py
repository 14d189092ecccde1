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
    slots_for,
    timing_rounds,
)
from solbench.timing.config import TimingConfig


@pytest.mark.parametrize("call_s, slots", [(0.0, 8), (20e-6, 8), (0.99e-3, 8), (1e-3, 4), (9.9e-3, 4),
                                           (10e-3, 2), (0.065, 2), (3.0, 2)])
def test_longer_calls_rotate_fewer_slots_but_never_one(call_s, slots):
    assert slots_for(call_s) == slots


def test_a_block_of_long_calls_shares_the_ci_target_with_the_other_rounds():
    timing = TimingConfig(target_rel_ci=0.01, long_call_ms=1.0)
    assert block_timing(timing, 2, 5e-3, "cuda:0").target_rel_ci == pytest.approx(0.01 * math.sqrt(2))
    assert block_timing(timing, 4, 5e-3, "cuda:0").target_rel_ci == pytest.approx(0.02)
    assert block_timing(timing, 1, 5e-3, "cuda:0") == timing
    assert block_timing(timing, 2, 0.5e-3, "cuda:0") == timing  # short calls: the whole target in every block


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
    gpu = TimingConfig.cuda()
    assert block_timing(gpu, 2, 1e-4, "cuda:0") == gpu  # a GPU block keeps its own budget


def test_later_cpu_rounds_warm_up_with_one_call_for_as_long_and_gpu_blocks_keep_theirs():
    cpu, gpu = TimingConfig.cpu(), TimingConfig.cuda()
    later = later_round_timing(cpu, "cpu")
    assert later.warmup == 1 and later.min_warmup_ms == cpu.min_warmup_ms > 0 and replace(later, warmup=cpu.warmup) == cpu
    assert later_round_timing(gpu, "cuda:0") == gpu
