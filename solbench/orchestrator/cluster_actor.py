"""What runs inside one Ray actor: the same per-device session a local run uses, on the actor's node.

`cluster.py` turns `SessionHost` into a Ray actor (one GPU each, `num_gpus=1`; one CPU each on a cluster
without GPUs). Ray makes the actor's GPU the only one it sees, so its session runs on `cuda:0` and its
two workers inherit that view. The host unpacks shipped problems into a private folder, evaluates a
job's workloads with `evaluate.evaluate_problem` exactly as a device thread of a local run does, and
yields each trace (as a dict) the moment it exists, so the driver can append it before the next starts.
The actor starts its two workers first thing, before it imports torch (the judging needs it), so their
start-up overlaps its own and the first problem does not wait for them. This module does not import ray
(or torch) at import time: it is plain Python the actor wraps, and the driver imports it too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from solbench.orchestrator.config import RunConfig, cuda_available, no_gpu_reason
from solbench.orchestrator.shipping import ShippedProblem, unpack_problem
from solbench.orchestrator.worker_pair import worker_pair
from solbench.spec.errors import SpecError
from solbench.spec.solution import Solution
from solbench.timing.clock_lock import lock_device_clocks


def node_device(config: RunConfig, gpu: bool = False) -> str:
    """The device this actor runs on: its one visible GPU (`gpu`: Ray gave it one, no need to ask torch),
    or the CPU where the run asks for it or (with device "auto") where the node has no GPU."""
    if config.device == "cpu":
        return "cpu"
    if gpu and os.environ.get("CUDA_VISIBLE_DEVICES"):  # Ray names the GPU it gave this actor there
        return "cuda:0"
    if cuda_available():
        return "cuda:0"
    if config.device == "auto":
        return "cpu"
    raise SpecError(f"device {config.device!r} was asked for, but on node {socket.gethostname()} {no_gpu_reason()}")


class SessionHost:
    """One device of the cluster: a DeviceSession, its speed-of-light pool, its unpacked problems."""

    def __init__(self, config: RunConfig, driver_omp_threads: str | None = None, gpu: bool = False):
        self.config = replace(config, cluster=None)
        self.device = node_device(self.config, gpu)
        if self.device != "cpu":  # Ray pins an actor without CPUs to one OpenMP thread; workers get the driver's
            os.environ.pop("OMP_NUM_THREADS", None)
            if driver_omp_threads is not None:
                os.environ["OMP_NUM_THREADS"] = driver_omp_threads
        workers = worker_pair(self.device)
        for worker in workers:  # their torch imports run while this process imports its own below
            worker.start()
        from solbench.orchestrator.analysis import AnalysisPool  # inner: after the workers started
        from solbench.orchestrator.session import DeviceSession  # inner: as above

        self.session = DeviceSession(self.device, self.config, workers)
        self.session.analysis = AnalysisPool(workers=1)
        self.session.analysis.warm()  # its torch import beside the workers', not before the first analysis
        self.problems_dir = Path(tempfile.mkdtemp(prefix="solbench-cluster-"))
        self.clocks = (lock_device_clocks([self.device]) if self.config.lock_clocks and self.device != "cpu"
                       else contextlib.ExitStack())
        self.stopping = False

    def describe(self) -> dict:
        """Where this actor runs: node name, device, process id (the driver's progress and tests). Like a
        local orchestrator, the actor itself never initialises CUDA: its workers do."""
        workers = (self.session.reference, self.session.candidate)
        return {"hostname": socket.gethostname(), "device": self.device, "pid": os.getpid(),
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "worker_pids": [w.running_pid for w in workers]}

    def run(self, shipped: ShippedProblem, solution: Solution | None, workload_uuids: list[str],
            run_seed: int | None = None) -> Iterator[dict]:
        """Evaluate `solution` (None: the reference) on the named workloads of the shipped problem, in
        that order; yield each trace as a dict as soon as it is made."""
        from solbench.orchestrator.evaluate import evaluate_problem  # inner: torch (see __init__)

        problem = unpack_problem(shipped, self.problems_dir)
        by_uuid = {w.uuid: w for w in problem.workloads}
        workloads = [by_uuid[u] for u in workload_uuids if u in by_uuid]
        for trace in evaluate_problem(self.session, problem, solution, self.config, workloads,
                                      skip=lambda _w: self.stopping, run_seed=run_seed):
            if self.stopping:
                return  # its workers may have been killed under it: not a result
            yield trace.to_dict()

    def stop(self) -> None:
        """Stop at once (the driver was interrupted): kill the workers of the workload in flight."""
        self.stopping = True
        for worker in (self.session.reference, self.session.candidate):
            with contextlib.suppress(Exception):
                worker.kill()
        shutil.rmtree(self.problems_dir, ignore_errors=True)  # the driver kills this actor next: no close()

    def close(self) -> None:
        """Stop both workers, the analysis pool and any clock lock; drop the unpacked problems."""
        self.session.close()
        self.session.analysis.close()
        self.clocks.close()
        shutil.rmtree(self.problems_dir, ignore_errors=True)
