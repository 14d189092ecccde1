"""A device's two workers, the reference's and the solution's: made together so that on the CPU they share
the cores claimed for them (`cpu_cores`)."""

from __future__ import annotations

import os

from solbench.orchestrator import cpu_cores
from solbench.orchestrator.process import WorkerProcess


def worker_pair(device: str) -> tuple[WorkerProcess, WorkerProcess]:
    """A device's (reference's, solution's) workers, not started; on the CPU both pinned to cores claimed for
    the pair (`cpu_cores`: the cores of a VM do not run a call alike), released by `release_cores`."""
    env: dict[str, str] = {}
    claimed = None
    if not device.startswith("cuda"):
        threads = os.environ.get("SOLBENCH_CPU_THREADS", "1")
        claimed = cpu_cores.claim(max(1, int(threads)) if threads.isdigit() else 1)
        env[cpu_cores.CORES_ENV] = cpu_cores.env_value(claimed)
    reference = WorkerProcess(device, extra_env=env, role="reference")
    reference.core_claim = claimed
    return reference, WorkerProcess(device, extra_env=env, role="solution")


def release_cores(pair: tuple[WorkerProcess, WorkerProcess]) -> None:
    """Give the pair's cores back (its session closed, or its workers were killed unused)."""
    for worker in pair:
        if worker.core_claim is not None:
            worker.core_claim.release()
