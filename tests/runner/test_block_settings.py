"""What one timed block is asked for, by the call's length: its CI target over the rounds, its argument slots."""

from __future__ import annotations

import math

import pytest

from solbench.orchestrator.timed import block_timing, slots_for
from solbench.timing.config import TimingConfig


@pytest.mark.parametrize("call_s, slots", [(0.0, 8), (20e-6, 8), (0.99e-3, 8), (1e-3, 4), (9.9e-3, 4),
                                           (10e-3, 2), (0.065, 2), (3.0, 2)])
def test_longer_calls_rotate_fewer_slots_but_never_one(call_s, slots):
    assert slots_for(call_s) == slots


def test_a_block_of_long_calls_shares_the_ci_target_with_the_other_rounds():
    timing = TimingConfig(target_rel_ci=0.01, long_call_ms=1.0)
    assert block_timing(timing, 2, 5e-3).target_rel_ci == pytest.approx(0.01 * math.sqrt(2))
    assert block_timing(timing, 4, 5e-3).target_rel_ci == pytest.approx(0.02)
    assert block_timing(timing, 1, 5e-3) == timing
    assert block_timing(timing, 2, 0.5e-3) == timing  # short calls: the whole target in every block
