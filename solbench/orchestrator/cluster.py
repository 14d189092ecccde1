"""A run over a Ray cluster: one session actor per GPU, a shared work queue, traces streamed back.

`run_cluster_jobs` is what `scheduler.run_jobs` calls when `RunConfig.cluster` is set, so `solbench run
--cluster`, `api.evaluate(..., cluster=...)` and the pytest plugin's `--solbench-cluster` take the same
path. The driver connects (or starts a local cluster), ships each problem once through the object store
(`shipping`), and runs one thread per actor (`cluster_actor.SessionHost`) that takes items from the
`work_queue`, streams the actor's traces into the run's `TraceSink` as they finish, and re-queues what a
dead actor owed before starting a replacement. Ctrl-C (or `stop`) kills the actors; traces already
written stay, and the next run with the same `-o` resumes. See docs/cluster.md.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from solbench.orchestrator.cluster_actor import SessionHost
from solbench.orchestrator.config import RunConfig
from solbench.orchestrator.jobs import Job
from solbench.orchestrator.shipping import pack_problem
from solbench.orchestrator.sink import TraceSink
from solbench.orchestrator.work_queue import MAX_STRIKES, WorkItem, WorkQueue
from solbench.spec.errors import SpecError, first_line
from solbench.spec.trace import Evaluation, Status, Trace
from solbench.spec.workload import Workload

INSTALL_HINT = "pip install 'solbench[ray]'"
ACTOR_START_TIMEOUT_S = 600.0  # a GPU node importing torch and CUDA for the first time can be slow
MAX_ACTOR_DEATHS = 3  # per slot: after this many, the slot gives up and the others carry on


class ClusterError(SpecError):
    """The cluster cannot run the work: Ray missing, no cluster at the address, no actor left."""


def import_ray():
    try:
        import ray  # inner: an optional extra
    except ImportError:
        raise ClusterError(f"--cluster needs Ray, which is not installed: {INSTALL_HINT}") from None
    return ray


def connect(address: str) -> bool:
    """Connect this process to the cluster at `address`; True when this call started Ray (and the run
    should shut it down). "auto": a running cluster, else a local one; "ray": a running one only."""
    ray = import_ray()
    if ray.is_initialized():
        return False  # the caller (a notebook, a test) already connected: use that cluster
    quiet = {"log_to_driver": False, "ignore_reinit_error": True}
    if address == "auto":
        try:
            ray.init(address="auto", **quiet)
        except ConnectionError:
            ray.init(include_dashboard=False, **quiet)
        return True
    try:
        ray.init(address="auto" if address == "ray" else address, **quiet)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ClusterError(f"cannot connect to the Ray cluster at {address!r}: {first}") from None
    return True


def actor_plan(config: RunConfig) -> tuple[int, dict]:
    """How many session actors to start and their Ray resource options: one GPU each where the cluster has
    GPUs (and the run is not on the CPU), else one CPU each (one per node unless `cluster_actors`)."""
    ray = import_ray()
    resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0))
    if config.device != "cpu" and gpus > 0:
        return min(gpus, config.cluster_actors or gpus), {"num_gpus": 1}
    if config.device == "cuda":
        raise ClusterError("--device cuda was asked for, but the Ray cluster has no GPU")
    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    cpus = max(1, int(resources.get("CPU", 1)))
    return min(cpus, config.cluster_actors or nodes), {"num_cpus": 1}


@dataclass
class Slot:
    """One actor place of the run: the live actor (None while none), where it runs, and how it fared."""

    index: int
    actor: object = None
    pending: tuple | None = None  # (actor, its `describe` ref): created by the launch, not yet answered
    label: str = ""
    info: dict = field(default_factory=dict)
    deaths: int = 0
    finished_workloads: int = 0


class ClusterLaunch:
    """Connecting and creating the session actors, begun as soon as the run's options are known: the actors
    start (a Ray worker process, its imports, the session's two workers) while the driver builds its jobs.
    Whoever finishes with it calls `close`: the actors that never got work go, and a Ray this started ends."""

    def __init__(self, config: RunConfig):
        self.config = config
        began = time.monotonic()
        self.ray = import_ray()
        self.started_ray = connect(config.cluster or "auto")
        self.connect_s = time.monotonic() - began  # the Ray start-up (or connection) alone
        self._closed, self.slots = False, []
        try:
            count, self.options = actor_plan(config)
            self._host = self.ray.remote(SessionHost)
            self.slots = [Slot(i) for i in range(count)]
            for slot in self.slots:
                slot.pending = self.create_actor()
        except BaseException:
            self.close()
            raise

    def create_actor(self) -> tuple:
        """A new session actor (Ray starts it in the background) and the ref its first answer will fill."""
        actor = self._host.options(max_concurrency=2, **self.options).remote(
            self.config, os.environ.get("OMP_NUM_THREADS"), "num_gpus" in self.options)
        return actor, actor.describe.remote()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for slot in self.slots:
            if slot.pending is not None:
                self.ray.kill(slot.pending[0])
                slot.pending = None
        if self.started_ray:
            self.ray.shutdown()


class ClusterRun:
    """The driver's side of one cluster run (see the module's docstring); `slots` are open to callers."""

    def __init__(self, jobs: list[Job], config: RunConfig, sink: TraceSink, *,
                 on_job_start: Callable[[Job, str], None] | None = None, stop: threading.Event | None = None,
                 launch: ClusterLaunch | None = None):
        self.launch = launch or ClusterLaunch(config)
        self.ray = self.launch.ray
        self.config, self.sink, self.on_job_start = config, sink, on_job_start
        self.stop = stop or threading.Event()
        items = [WorkItem(job, tuple(w for w in job.workloads if not sink.is_done(job, w))) for job in jobs]
        self.queue = WorkQueue(items)
        self.slots: list[Slot] = []
        self.errors: list[BaseException] = []
        self._shipped: dict[int, object] = {}  # id(problem) -> object ref of its packed folder
        self._lock = threading.Lock()
        self.slots = self.launch.slots

    def shipped(self, job: Job):
        """The object ref of the job's problem folder, packed and put once per problem."""
        with self._lock:
            ref = self._shipped.get(id(job.problem))
            if ref is None:
                ref = self._shipped[id(job.problem)] = self.ray.put(pack_problem(job.problem))
            return ref

    def start_actor(self, slot: Slot) -> bool:
        """A fresh actor in `slot`, waited for until it answers; False if none came up in time (no free
        resources, its node gone) or the run no longer needs it."""
        actor, ready = slot.pending or self.launch.create_actor()
        slot.pending = None
        deadline = time.monotonic() + ACTOR_START_TIMEOUT_S
        while not self.stop.is_set() and not self.queue.idle() and time.monotonic() < deadline:
            done, _ = self.ray.wait([ready], timeout=1.0)
            if done:
                try:
                    slot.info = self.ray.get(ready)
                except self.ray.exceptions.RayError as exc:  # its constructor failed (no GPU, bad device)
                    self.errors.append(ClusterError(f"a session actor could not start: {first_line(exc)}"))
                    self.ray.kill(actor)
                    return False
                slot.actor = actor
                gpu = slot.info.get("cuda_visible_devices")
                where = f"gpu{gpu}" if slot.info["device"] != "cpu" and gpu else f"{slot.info['device']}#{slot.index}"
                slot.label = f"{slot.info['hostname']}/{where}"
                return True
        self.ray.kill(actor)
        return False

    def run_item(self, slot: Slot, item: WorkItem) -> None:
        """Stream one item's traces from the slot's actor into the sink; on the actor's death, give back
        what it owed (and record workloads that killed MAX_STRIKES actors as failures)."""
        if self.on_job_start:
            self.on_job_start(item.job, slot.label)
        reported: set[str] = set()
        stream = slot.actor.run.options(num_returns="streaming").remote(  # each trace as soon as it is yielded
            self.shipped(item.job), item.job.solution, [w.uuid for w in item.workloads])
        try:
            for ref in stream:
                trace = Trace.from_dict(self.ray.get(ref))
                if self.stop.is_set():
                    break  # its workers may have been killed under it: not a result
                reported.add(trace.workload_uuid)
                self.sink.accept(item.job, trace)
                slot.finished_workloads += 1
        except self.ray.exceptions.RayActorError as exc:
            if self.stop.is_set():  # killed by the run's own stop: nothing to re-queue or blame
                self.queue.finish()
                return
            slot.actor, slot.deaths = None, slot.deaths + 1
            for workload in self.queue.give_back(item, reported):
                self.sink.accept(item.job, self.killer_trace(item.job, workload, slot, exc))
            return
        except BaseException:
            self.queue.finish()
            raise
        self.queue.finish()

    def killer_trace(self, job: Job, workload: Workload, slot: Slot, exc: BaseException) -> Trace:
        """The failure recorded for a workload that was in flight each time MAX_STRIKES actors died."""
        solution = job.resolved_solution()
        log = (f"the session actor running this workload died {MAX_STRIKES} times (last on {slot.label}): "
               f"{first_line(exc)}; not retried")
        evaluation = Evaluation(status=Status.RUNTIME_ERROR, log=log,
                                timestamp=datetime.now(UTC).isoformat(timespec="seconds"))
        return Trace(definition=job.problem.name, workload=workload, solution=solution.name,
                     solution_hash=solution.content_hash(), evaluation=evaluation)

    def slot_loop(self, slot: Slot) -> None:
        try:
            while not self.stop.is_set():
                if slot.actor is None and (slot.deaths >= MAX_ACTOR_DEATHS or not self.start_actor(slot)):
                    return
                item = self.queue.take()
                if item is None:
                    return
                self.run_item(slot, item)
        except BaseException as exc:  # noqa: BLE001 - surfaced once the other slots finish
            if not self.stop.is_set():
                self.errors.append(exc)

    def run(self) -> list[Trace]:
        threads = [threading.Thread(target=self.slot_loop, args=(s,), name=f"solbench-cluster-{s.index}",
                                    daemon=True) for s in self.slots]
        for t in threads:
            t.start()
        interrupted: BaseException | None = None
        try:
            while any(t.is_alive() for t in threads) and not self.stop.is_set():
                for t in threads:
                    t.join(timeout=0.2)
        except (KeyboardInterrupt, SystemExit) as exc:
            interrupted = exc
            self.stop.set()
        self.shutdown(threads)
        if interrupted is not None:
            raise interrupted
        if self.errors:
            raise self.errors[0]
        left = self.queue.remaining()
        if left and not self.stop.is_set():
            raise ClusterError(f"{left} workload(s) were not run: no session actor is left (each died "
                               f"{MAX_ACTOR_DEATHS} times or none could start); re-run with the same -o to resume")
        return self.sink.results

    def shutdown(self, threads: list[threading.Thread]) -> None:
        """End every actor: on a stop, kill the workers in flight first; otherwise let them close cleanly."""
        self.queue.close()
        actors = [s.actor for s in self.slots if s.actor is not None]
        if self.stop.is_set():
            try:  # a threaded actor: `stop` runs beside the `run` in flight and kills its workers
                self.ray.wait([a.stop.remote() for a in actors], num_returns=len(actors), timeout=10)
            except Exception:  # noqa: BLE001 - an actor already gone needs no stopping
                pass
        else:
            try:
                self.ray.wait([a.close.remote() for a in actors], num_returns=len(actors), timeout=60)
            except Exception:  # noqa: BLE001 - an actor already gone needs no closing
                pass
        for actor in actors + [s.pending[0] for s in self.slots if s.pending is not None]:
            self.ray.kill(actor)
        for slot in self.slots:
            slot.pending = None
        for t in threads:
            t.join(timeout=30)


def run_cluster_jobs(jobs: list[Job], config: RunConfig, sink: TraceSink, *,
                     on_job_start: Callable[[Job, str], None] | None = None,
                     stop: threading.Event | None = None, launch: ClusterLaunch | None = None) -> list[Trace]:
    """Evaluate the jobs on the cluster `config.cluster` names; traces go through `sink` as they finish.
    `launch`, if given, is the connection and actors begun earlier (this run closes it)."""
    launch = launch or ClusterLaunch(config)
    try:
        return ClusterRun(jobs, config, sink, on_job_start=on_job_start, stop=stop, launch=launch).run()
    finally:
        launch.close()
