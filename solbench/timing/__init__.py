"""Timing: statistics, L2 flush, CUDA-event / CPU clock timers, NVML telemetry and clock locking.

Modules are imported directly (``from solbench.timing.timer import time_iterations``); this package
file stays empty so that importing ``solbench.timing.stats`` does not pull in torch.
"""
