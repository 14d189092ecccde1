"""The two workers of one device, the reference's and the solution's, and every request made to them.

`DeviceSession.ask` is the one path a request takes: send it, wait with a timeout, read the alarm
channel, and screen what came back from the solution's worker (a failure status it may not claim, an
implausible timing reply, a reply out of sequence) before anything else looks at it. Worker lifecycle
lives here too: which code a process has seen, when it must be replaced, and the restart after a
failed CUDA graph capture (`ask_timed`)."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from solbench import languages
from solbench.check.anticheat import check_time_reply, screen_failure
from solbench.orchestrator.config import RunConfig
from solbench.orchestrator.devices import compute_capability
from solbench.orchestrator.lifetime import at_once
from solbench.orchestrator.phases import PhaseAccount
from solbench.orchestrator.process import (
    WorkerDied,
    WorkerProcess,
    WorkerProtocolError,
    WorkerTimeout,
)
from solbench.orchestrator.reuse_key import load_key, may_share_process
from solbench.orchestrator.worker_pair import release_cores, worker_pair
from solbench.protocol import messages as msg
from solbench.spec.problem import Problem
from solbench.spec.solution import Solution, is_reference, shadowing_sources
from solbench.spec.trace import Environment as EnvironmentRecord
from solbench.spec.trace import Status
from solbench.spec.workload import Workload

TRIM_MIN_SET_BYTES = 256 << 20  # one input set this large or larger: workers are asked to trim their caches
CPU_PREFETCH_MAX_SET_BYTES = 2 << 30  # larger sets are not built twice at once (host memory)

class StepFailed(Exception):
    """A worker request ended without a usable reply; carries the trace status and log, and for a timed
    block whose call could not be captured as a CUDA graph, why (`capture_failed`)."""

    def __init__(self, status: Status, log: str, capture_failed: str | None = None):
        super().__init__(log)
        self.status = status
        self.log = log
        self.capture_failed = capture_failed


class DeviceSession:
    """The two workers of one device: the reference's and the solution's."""

    def __init__(self, device: str, config: RunConfig,
                 workers: tuple[WorkerProcess, WorkerProcess] | None = None):
        self.device = device
        self.config = config
        # `workers`: (reference's, solution's) already started by the caller (a cluster actor starts them
        # before it imports this module, so their imports overlap its own).
        self.reference, self.candidate = workers or worker_pair(device)
        self._loaded: dict[int, tuple] = {}  # id(worker) -> (what is loaded there, whether trusted, in which pid)
        self._loads = 0
        self.environment: EnvironmentRecord | None = None
        self.runtime_warnings: list[str] = []  # what the solution's audit hook noticed (per solution)
        self.analysis = None  # an AnalysisPool shared by the device sessions of a run, if any
        self.costs: dict[str, object] = {}  # workload uuid -> Future of its speed-of-light analysis
        # CUDA IPC for large outputs (solbench.worker.transfer): offered to each new solution's worker on a
        # GPU, withdrawn for that solution when a transfer could not use it.
        self.ipc_usable = True
        self.ipc_offered = False  # whether the current solution's worker was ever asked for IPC exports
        self.reference_job: tuple | None = None  # (problem, solution) loaded in the reference worker
        self.candidate_job: tuple | None = None  # (problem, solution) loaded in the solution's worker
        self.graphless: dict[tuple, str] = {}  # (worker role, loaded key) -> why its call failed CUDA-graph capture
        self.phases = PhaseAccount()  # seconds per phase of the current workload (`take_phases`)
        self._depth = 0  # nested requests (a ping inside a timed request) count in their outer request
        self._replied: msg.Reply | None = None
        # A solution's worker started ahead of need: the next solution gets a process that has already
        # imported torch (seconds per solution). It has served no request, so it has seen no code.
        self.spare: WorkerProcess | None = None
        self.expect_more = False  # whether more jobs follow on this device (then a spare is worth starting)
        self._prefetch: threading.Thread | None = None  # the reference worker building a trial's inputs early

    def prestart(self) -> None:
        """Start both workers now, so their (slow) imports overlap (the solution's: the spare, when one is up)."""
        if not self.reference.alive:
            self.reference.start()
        if not self.candidate.alive:
            self._start_candidate(self.candidate)

    def close(self) -> None:
        """Stop both workers and kill the spare, all at once: each waits for its process to exit, which on a
        GPU (a CUDA context torn down) takes a while, so the waits overlap instead of adding up."""
        self._join_prefetch()
        spare, self.spare = self.spare, None
        at_once([self.reference.stop, self.candidate.stop] + ([spare.kill] if spare is not None else []))
        release_cores((self.reference, self.candidate))

    def _start_candidate(self, worker: WorkerProcess) -> None:
        """A fresh process for a solution: the spare when one is up, else a new one."""
        spare, self.spare = self.spare, None
        if spare is not None and spare.alive and spare.requests == 0:
            worker.adopt(spare)
            return
        if spare is not None:
            spare.kill()  # died on its own: its scratch folder and channel go with it
        worker.start()

    def _spawn_spare(self) -> None:
        """Start the next solution's process while this one is evaluated, when another job will need it."""
        if self.expect_more and (self.spare is None or not self.spare.alive):
            self.spare = WorkerProcess(self.device, extra_env=self.candidate.extra_env)
            self.spare.start()

    def ready_for_next_solution(self) -> None:
        """Between a pool's runs: the process that ran untrusted code dies now, not at the next load, and one
        that has seen no code waits for the next solution (the spare, else a fresh solution worker)."""
        self._join_prefetch()
        trusted = (self._loaded.get(id(self.candidate)) or (None, False))[1]
        if self.candidate.alive and self.candidate.requests > 0 and not trusted:
            self.retire(self.candidate)
        self.graphless.clear()
        if not self.candidate.alive and not (self.spare is not None and self.spare.alive):
            self.candidate.start()

    def refusal_here(self, problem: Problem, solution: Solution) -> str | None:
        """Why this machine cannot judge `solution` at all (its language needs CUDA, a package that is not
        installed or another GPU, or gets a dtype wrong on CPU): the same reason the solution's worker would
        give at load, known without starting one. None when a worker must decide (sources it refuses as
        shadowing)."""
        if shadowing_sources([s.path for s in solution.sources]):
            return None
        try:
            return languages.solution_refusal(solution, problem.definition.dtypes(), self.device.startswith("cuda"),
                                              compute_capability(self.device))
        except Exception:  # noqa: BLE001 - an unknown language is reported by the worker's loader
            return None

    # -- requests ---------------------------------------------------------------------------

    def ask(self, worker: WorkerProcess, request: msg.Request, timeout_s: float) -> msg.Reply:
        """The reply to `request`, screened; StepFailed (with the trace status) when there is none."""
        if worker is self.reference or isinstance(request, msg.Time):
            self._join_prefetch()  # one request at a time on a channel; no preparation beside a timed block
        outer, started, fresh = self._depth == 0, time.monotonic(), worker.requests == 0
        if outer:
            self._replied = None
        self._depth += 1
        try:
            return self._ask(worker, request, timeout_s)
        finally:
            self._depth -= 1
            if outer:
                self.phases.account(request, self._replied, time.monotonic() - started, fresh)

    def add_phase(self, name: str, seconds: float) -> None:
        self.phases.add(name, seconds)

    def take_phases(self) -> dict[str, float]:
        """The current workload's seconds per phase, and a fresh account for the next one."""
        return self.phases.take()

    def _ask(self, worker: WorkerProcess, request: msg.Request, timeout_s: float) -> msg.Reply:
        mark = worker.output.mark()
        asked = time.monotonic()
        untrusted = worker is self.candidate
        try:
            reply = worker.request(request, timeout_s)
        except (WorkerTimeout, WorkerDied, WorkerProtocolError) as exc:
            self._loaded.pop(id(worker), None)
            self.check_alarms(worker, untrusted)
            status = {WorkerTimeout: Status.TIMEOUT, WorkerDied: Status.RUNTIME_ERROR}.get(type(exc), Status.REWARD_HACK)
            if untrusted and isinstance(exc, WorkerDied) and exc.code == msg.ALARM_LOST_EXIT:
                status = Status.REWARD_HACK
            if not untrusted and isinstance(exc, WorkerDied):
                exc = f"harness failure, this workload is not judged: the reference worker died ({exc}); " \
                      f"the next workload loads the reference into a fresh process"
            raise StepFailed(status, f"{exc}\n{worker.output.since(mark)}") from None
        if self._depth == 1:
            self._replied = reply  # the outer request's reply (what its accounting reads)
        self.check_alarms(worker, untrusted)
        if untrusted:
            for note in reply.audit[:50]:
                text = f"runtime: {str(note)[:300]}"
                if text not in self.runtime_warnings:
                    self.runtime_warnings.append(text)
        if isinstance(reply, msg.Failed):
            self._raise_failure(worker, request, reply, mark, timeout_s, untrusted)
        if untrusted and isinstance(request, msg.Time):
            problems = check_time_reply(reply, request.config, checked_outputs=request.checked_outputs,
                                        required_outputs=request.required_outputs,
                                        elapsed_s=time.monotonic() - asked, fixed_seeds=request.seeds,
                                        reuse_allowed=request.reuse_inputs, fixed_allowed=request.fixed_inputs)
            if problems:
                self.retire(worker)
                raise StepFailed(Status.REWARD_HACK, "implausible timing reply from the solution's worker: "
                                 + "; ".join(problems))
            # Only a worker that has sent every earlier reply answers this next: a reply forged by a second
            # writer on the channel makes the harness's own reply arrive out of sequence here.
            self.ask(worker, msg.Ping(), min(timeout_s, 60))
        return reply

    def _raise_failure(self, worker: WorkerProcess, request: msg.Request, reply: msg.Failed, mark: int,
                       timeout_s: float, untrusted: bool) -> None:
        """A failed request as StepFailed, after deciding whether the worker may claim its status."""
        output = worker.output.since(mark)
        log = reply.log + (f"\n--- output ---\n{output}" if output.strip() else "")
        status = reply.status
        if untrusted and status in ("INVALID_REFERENCE", "MISSING_DATA"):
            seed = getattr(request, "seed", None)
            seeds = [seed] if seed is not None else list(getattr(request, "seeds", []))[:1]
            workload = getattr(request, "workload", None)
            verdict = (self.reference_fails_too(workload, seeds[0], timeout_s, run=False,
                                                profile=getattr(request, "profile", "standard"))
                       if workload is not None and seeds else None)
            if verdict is not None:
                raise StepFailed(verdict.status, verdict.log)
        if untrusted:
            status, note = screen_failure(request.OP, status, skip_plausible=self._skip_plausible(request))
            log = f"{note}\n{log}" if note else log
        status = Status(status) if status in Status.__members__ else Status.RUNTIME_ERROR
        if untrusted and status in (Status.REWARD_HACK, Status.RUNTIME_ERROR):
            self.retire(worker)  # whatever it left behind (threads, processes, CUDA errors) dies with it
        raise StepFailed(status, log, capture_failed=reply.capture_failed)

    def _skip_plausible(self, request: msg.Request) -> bool:
        """Whether this machine itself cannot judge the solution a `load` names (then SKIPPED is believable)."""
        if not isinstance(request, msg.Load):
            return False
        try:
            names, definition = request.solution.spec.languages, request.definition
            return languages.refusal(names, definition.dtypes(), self.device.startswith("cuda"),
                                     compute_capability(self.device)) is not None
        except Exception:  # noqa: BLE001 - an unknown language is reported by the loader
            return False

    def ask_timed(self, worker: WorkerProcess, request: msg.Time, timeout_s: float) -> msg.Timed:
        """A timed-block request. With CUDA graphs asked for, a call that cannot be captured ends the
        block (`worker.graphs.capture_graphs`): a failed capture can leave its process broken (the
        CUDA RNG left in capture mode, a graph pool never freed: seen on an H100 with an MoE
        reference). That worker is restarted and the block timed in the clean process, as launched;
        later blocks of the same code are not captured again."""
        role = ("reference" if worker is self.reference else "solution", (self._loaded.get(id(worker)) or (None,))[0])
        launched = replace(request, config=replace(request.config, cuda_graphs=False))
        if role in self.graphless and request.config.cuda_graphs:
            return self._graph_unavailable(self.ask(worker, launched, timeout_s), self.graphless[role])
        try:
            return self.ask(worker, request, timeout_s)
        except StepFailed as exc:
            if not request.config.cuda_graphs or exc.capture_failed is None:
                raise
            note = exc.capture_failed[:400]
        self.graphless[role] = note
        job = self.reference_job if worker is self.reference else self.candidate_job
        if worker.alive:
            self.retire(worker)
        self.load(worker, *job)  # a fresh solution process: CUDA IPC is offered to it afresh
        if launched.ipc_min_bytes is not None:
            launched = replace(launched, ipc_min_bytes=self.ipc_min_bytes())
        return self._graph_unavailable(self.ask(worker, launched, timeout_s), note)

    @staticmethod
    def _graph_unavailable(reply: msg.Timed, note: str) -> msg.Timed:
        """A block timed as launched although graphs were asked for: flagged, with the capture's error."""
        reply.graph_note = note
        unfaithful = {"cuda_graph_unfaithful"} if note.startswith("cuda_graph_unfaithful") else set()
        reply.flags = sorted(set(reply.flags) | {"cuda_graph_unavailable"} | unfaithful)
        return reply

    def check_alarms(self, worker: WorkerProcess, untrusted: bool) -> None:
        """REWARD_HACK when the solution's audit hook raised an alarm or its alarm channel was closed."""
        alarms, closed = worker.read_alarms()
        if not untrusted:
            return
        if closed and worker.alive:
            alarms.append("the alarm channel was closed from inside the solution's process")
        if alarms:
            self.retire(worker)
            raise StepFailed(Status.REWARD_HACK, "the solution's process did something no kernel needs: "
                             + "; ".join(list(dict.fromkeys(alarms))[:10]))

    def reference_fails_too(self, workload: Workload, seed: int, timeout_s: float, *, run: bool,
                            profile: str = "standard") -> StepFailed | None:
        """The solution's worker failed: does the reference worker fail on the same inputs (building
        them, or with `run` also running the reference)? Its failure, if any, is the verdict, and
        no solution is blamed for a missing blob or a GPU that cannot run the problem at all."""
        try:
            self.ask(self.reference, msg.Inputs(workload=workload, seed=seed, run=run, profile=profile), timeout_s)
        except StepFailed as exc:
            if exc.status in (Status.MISSING_DATA, Status.INVALID_REFERENCE):
                return exc
        return None

    def prefetch_inputs(self, workload: Workload, seed: int, profile: str, set_bytes: int) -> None:
        """Let the reference worker build (and cache) a trial's inputs while the solution's worker runs
        the trial on its own copy, so the judge that follows finds them ready: the two workers' input
        generation overlaps instead of adding up. On a CPU only, where generation is the slow part (a GPU
        draws inputs in milliseconds, and work beside the trial call there would move its `call_s`, which
        sizes the timed blocks). The reference is trusted and nothing here is a verdict: a failure is
        ignored, and the judge's own request reports it. The next request to the reference waits for this one."""
        self._join_prefetch()
        if not self.reference.alive or self.device.startswith("cuda") or set_bytes >= CPU_PREFETCH_MAX_SET_BYTES:
            return
        request, worker, timeout_s = msg.Inputs(workload=workload, seed=seed, run=False, profile=profile), \
            self.reference, self.config.timeout_s

        def build() -> None:
            try:
                worker.request(request, timeout_s)
            except Exception:  # noqa: BLE001 - the judge asks again and reports what went wrong
                pass

        self._prefetch = threading.Thread(target=build, name="solbench-prefetch", daemon=True)
        self._prefetch.start()

    def _join_prefetch(self) -> None:
        thread, self._prefetch = self._prefetch, None
        if thread is not None:
            thread.join()

    def trim(self, worker: WorkerProcess, set_bytes: int) -> None:
        """Ask a worker to drop a large input cache before the other worker is timed beside it
        (`worker.inputs_cache.handle_trim`); skipped for small inputs, where no cache is worth a request."""
        if set_bytes >= TRIM_MIN_SET_BYTES and worker.alive:
            self.ask(worker, msg.Trim(), 60)

    def retire(self, worker: WorkerProcess) -> None:
        """Kill a worker whose process can no longer be trusted; the next load starts a fresh one."""
        worker.kill()
        self._loaded.pop(id(worker), None)

    def load(self, worker: WorkerProcess, problem: Problem, solution: Solution) -> None:
        """Load a solution into a worker; untrusted code always gets a fresh process. One process serves the references
        of many problems whose data it may read (CUDA starts cost seconds), unless `reuse_key.may_share_process`."""
        self._join_prefetch()  # a worker may be stopped below: not while a request is on its channel
        key = load_key(problem, solution, self.config.all_data_roots(problem.directory))
        previous = self._loaded.get(id(worker))
        if previous is not None and previous[0] == key and worker.alive and previous[2] == worker.running_pid:
            self._note_job(worker, problem, solution)  # the same content: what the process holds is the same
            return
        trusted = is_reference(solution, problem.definition)
        reason = None if trusted or worker is self.reference else self.refusal_here(problem, solution)
        if reason:
            raise StepFailed(Status.SKIPPED, reason)
        shared = previous is not None and previous[1] and trusted and may_share_process(self, worker, problem)
        reuse = worker.alive and (worker.requests == 0 or shared)
        readable = WorkerProcess.readable_roots(problem, self.config.all_data_roots(problem.directory))
        if worker.alive and not (reuse and worker.may_read(readable)):
            worker.stop()  # a module cannot be unloaded: a new solution gets a new process
        if not worker.alive and worker is self.candidate:
            self._start_candidate(worker)
        elif not worker.alive:
            worker.start()
        fresh = worker.requests == 0  # a new process (started here or by `prestart`)
        self._loaded[id(worker)] = (None, trusted, worker.running_pid)  # from here on the process has seen this code
        self._loads += 1
        request = msg.Load(definition=problem.definition, solution=solution,
                           work_dir=f"{worker.scratch.name}/load{self._loads}",
                           compile_timeout_s=self.config.compile_timeout_s,
                           data_roots=[str(p) for p in self.config.all_data_roots(problem.directory)],
                           readable_roots=worker.granted(readable))
        self.ask(worker, request, self.config.compile_timeout_s + 60)
        self._loaded[id(worker)] = (key, trusted, worker.running_pid)
        self._note_job(worker, problem, solution)
        if worker is not self.reference:
            self.ipc_usable, self.ipc_offered = True, False  # a solution (re)loaded: IPC is offered afresh
        if self.environment is None:
            self.environment = self.ask(worker, msg.Environment(), 60).environment
        if fresh and worker is self.candidate:
            self._spawn_spare()

    def _note_job(self, worker: WorkerProcess, problem: Problem, solution: Solution) -> None:
        setattr(self, "reference_job" if worker is self.reference else "candidate_job", (problem, solution))

    def ipc_min_bytes(self) -> int | None:
        """What a solution's `call`/`time` request carries about CUDA IPC (None: bytes only). Never
        put in a request to the reference worker, which must not export its memory."""
        minimum = self.config.ipc_min_bytes
        if not self.device.startswith("cuda") or not self.ipc_usable or not minimum or minimum <= 0:
            return None
        self.ipc_offered = True
        return int(minimum)
