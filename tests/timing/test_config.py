"""TimingConfig defaults and validation."""

from __future__ import annotations

import pytest
import torch

from solbench.timing.config import TimingConfig


def test_gpu_defaults():
    c = TimingConfig()
    assert (c.warmup, c.iters, c.short_call_iters, c.min_block_ms, c.adaptive, c.target_rel_ci) == (3, 10, 50, 100.0,
                                                                                                    True, 0.01)
    assert c.max_iters >= c.iters and c.max_time_s > 0 and c.min_warmup_ms > 0
    assert c.clock_warmup and c.l2_flush and c.gc_off and c.settle_ms == 1.0
    assert TimingConfig.cuda() == c


def test_cpu_defaults_are_cheaper():
    cpu, gpu = TimingConfig.cpu(), TimingConfig.cuda()
    assert cpu.short_call_iters < gpu.short_call_iters and cpu.min_block_ms < gpu.min_block_ms
    assert cpu.max_time_s < gpu.max_time_s
    # a CPU block of short calls lasts a fixed time (the host's episodes), so its count cap is higher
    assert 0 < cpu.short_block_ms < gpu.min_block_ms and gpu.short_block_ms == 0 and cpu.max_iters > gpu.max_iters
    assert not cpu.clock_warmup and cpu.settle_ms == 0


@pytest.mark.parametrize(("device", "iters"), [("cuda", 50), ("cuda:1", 50), (0, 50), (torch.device("cuda", 0), 50),
                                               ("cpu", 10), (torch.device("cpu"), 10)])
def test_for_device(device, iters):
    assert TimingConfig.for_device(device).short_call_iters == iters


def test_overrides_apply():
    assert TimingConfig.cpu(iters=7).iters == 7
    assert TimingConfig.for_device("cuda", l2_flush=False).l2_flush is False


@pytest.mark.parametrize("bad", [dict(iters=0), dict(warmup=-1), dict(iters=50, max_iters=10), dict(ci_level=1.0),
                                 dict(target_rel_ci=0), dict(max_time_s=0), dict(clock_working_fraction=1.5),
                                 dict(batch_min=0), dict(settle_ms=-1), dict(settle_ms=1000)])
def test_validation(bad):
    with pytest.raises(ValueError):
        TimingConfig(**bad)


def test_cuda_graphs_reach_the_workers_timing_config():
    from solbench.cli import build_parser
    from solbench.cli.run import config_from_args

    config = config_from_args(build_parser().parse_args(["run", "problems"]))  # on by default
    assert config.cuda_graphs and config.timing_config("cuda").cuda_graphs is True
    assert TimingConfig.from_dict(config.timing_config("cuda").to_dict()).cuda_graphs
    assert config.timing_config("cpu").cuda_graphs is False  # nothing to capture: a CPU trace never claims it
    launched = config_from_args(build_parser().parse_args(["run", "problems", "--no-cuda-graphs"]))
    assert not launched.cuda_graphs and launched.timing_config("cuda").cuda_graphs is False
