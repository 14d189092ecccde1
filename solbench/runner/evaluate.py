"""Evaluate one solution on one problem, workload by workload, on one device.

The orchestrator (this module) never imports solution code. A reference worker and a solution
worker regenerate identical inputs from secret seeds; only outputs come back here, where they are
judged. Each finished workload becomes a `Trace` at once, so a crash later loses nothing.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from datetime import UTC, datetime

from solbench.runner.config import RunConfig
from solbench.runner.process import WorkerDied, WorkerProcess, WorkerProtocolError, WorkerTimeout
from solbench.spec.errors import SpecError
from solbench.spec.problem import Problem
from solbench.spec.solution import Solution, reference_solution
from solbench.spec.trace import (
    Correctness,
    Environment,
    Evaluation,
    Performance,
    Status,
    Trace,
)
from solbench.spec.workload import Workload


class StepFailed(Exception):
    """A worker request ended without a usable reply; carries the trace status and log."""

    def __init__(self, status: Status, log: str):
        super().__init__(log)
        self.status = status
        self.log = log


TRIM_MIN_SET_BYTES = 256 << 20  # one input set this large or larger: workers are asked to trim their caches


class DeviceSession:
    """The two workers of one device: the reference's and the solution's."""

    def __init__(self, device: str, config: RunConfig):
        self.device = device
        self.config = config
        self.reference = WorkerProcess(device)
        self.candidate = WorkerProcess(device)
        self._loaded: dict[int, tuple] = {}  # id(worker) -> (what is loaded there, whether it is trusted)
        self._loads = 0
        self.environment: dict | None = None
        self.runtime_warnings: list[str] = []  # what the solution's audit hook noticed (per solution)
        self.analysis = None  # an AnalysisPool shared by the device sessions of a run, if any
        self.costs: dict[str, object] = {}  # workload uuid -> Future of its speed-of-light analysis
        # CUDA IPC for large outputs (solbench.runner.transfer): offered to each new solution's worker on a
        # GPU, withdrawn for that solution when a transfer could not use it.
        self.ipc_usable = True
        self.ipc_offered = False  # whether the current solution's worker was ever asked for IPC exports
        self._reference_job: tuple | None = None  # (problem, solution) loaded in the reference worker
        self._candidate_job: tuple | None = None  # (problem, solution) loaded in the solution's worker
        self.graphless: dict[tuple, str] = {}  # (worker role, loaded key) -> why its call failed CUDA-graph capture

    def prestart(self) -> None:
        """Start both workers now, so their (slow) imports overlap."""
        for worker in (self.reference, self.candidate):
            if not worker.alive:
                worker.start()

    def close(self) -> None:
        self.reference.stop()
        self.candidate.stop()

    # -- requests ---------------------------------------------------------------------------

    def ask(self, worker: WorkerProcess, message: dict, timeout_s: float) -> dict:
        mark = worker.output.mark()
        asked = time.monotonic()
        untrusted = worker is self.candidate
        try:
            reply = worker.request(message, timeout_s)
        except WorkerTimeout as exc:
            self._loaded.pop(id(worker), None)
            self.check_alarms(worker, untrusted)
            raise StepFailed(Status.TIMEOUT, f"{exc}\n{worker.output.since(mark)}") from None
        except WorkerDied as exc:
            self._loaded.pop(id(worker), None)
            self.check_alarms(worker, untrusted)
            raise StepFailed(Status.RUNTIME_ERROR, f"{exc}\n{worker.output.since(mark)}") from None
        except WorkerProtocolError as exc:
            self._loaded.pop(id(worker), None)
            self.check_alarms(worker, untrusted)
            raise StepFailed(Status.REWARD_HACK, f"{exc}\n{worker.output.since(mark)}") from None
        if not isinstance(reply, dict) or "ok" not in reply:
            raise StepFailed(Status.RUNTIME_ERROR, "the worker sent a malformed reply")
        self.check_alarms(worker, untrusted)
        if untrusted:
            audit = reply.get("audit")
            if isinstance(audit, list):
                for note in audit[:50]:
                    text = f"runtime: {str(note)[:300]}"
                    if text not in self.runtime_warnings:
                        self.runtime_warnings.append(text)
        if not reply["ok"]:
            output = worker.output.since(mark)
            log = str(reply.get("log", "")) + (f"\n--- output ---\n{output}" if output.strip() else "")
            status = reply.get("status", "RUNTIME_ERROR")
            if untrusted and status in ("INVALID_REFERENCE", "MISSING_DATA"):
                seeds = [message["seed"]] if "seed" in message else list(message.get("seeds") or [])[:1]
                verdict = (self.reference_fails_too(message["workload"], seeds[0], timeout_s, run=False)
                           if "workload" in message and seeds else None)
                if verdict is not None:
                    raise StepFailed(verdict.status, verdict.log)
            if untrusted:
                status, note = screen_candidate_failure(message, status, self.device)
                log = f"{note}\n{log}" if note else log
            status = Status(status) if status in Status.__members__ else Status.RUNTIME_ERROR
            if untrusted and status in (Status.REWARD_HACK, Status.RUNTIME_ERROR):
                self.retire(worker)  # whatever it left behind (threads, processes, CUDA errors) dies with it
            raise StepFailed(status, log)
        if untrusted and message.get("op") == "time":
            from solbench.check.anticheat import check_time_reply

            problems = check_time_reply(reply, message["config"], checked_outputs=message.get("checked_outputs", 0),
                                        required_outputs=message.get("required_outputs"),
                                        elapsed_s=time.monotonic() - asked)
            if problems:
                self.retire(worker)
                raise StepFailed(Status.REWARD_HACK, "implausible timing reply from the solution's worker: "
                                 + "; ".join(problems))
            # Only a worker that has sent every earlier reply answers this next: a reply forged by a second
            # writer on the channel makes the harness's own reply arrive out of sequence here.
            self.ask(worker, {"op": "ping"}, min(timeout_s, 60))
        return reply

    def ask_timed(self, worker: WorkerProcess, message: dict, timeout_s: float) -> dict:
        """A timed-block request. With CUDA graphs asked for, a call that cannot be captured ends the
        block (`worker_timing.capture_graphs`): a failed capture can leave its process broken (the
        CUDA RNG left in capture mode, a graph pool never freed: seen on an H100 with an MoE
        reference). That worker is restarted and the block timed in the clean process, as launched;
        later blocks of the same code are not captured again."""
        from solbench.runner.config import GRAPH_CAPTURE_FAILED

        role = ("reference" if worker is self.reference else "solution", (self._loaded.get(id(worker)) or (None,))[0])
        launched = {**message, "config": {**message["config"], "cuda_graph": False}}
        if role in self.graphless and message["config"].get("cuda_graph"):
            return self._graph_unavailable(self.ask(worker, launched, timeout_s), self.graphless[role])
        try:
            return self.ask(worker, message, timeout_s)
        except StepFailed as exc:
            if not message["config"].get("cuda_graph") or GRAPH_CAPTURE_FAILED not in exc.log:
                raise
            note = exc.log.split(GRAPH_CAPTURE_FAILED, 1)[1].lstrip(": ").splitlines()[0][:400]
        self.graphless[role] = note
        job = self._reference_job if worker is self.reference else self._candidate_job
        if worker.alive:
            self.retire(worker)
        self.load(worker, *job)  # a fresh solution process: CUDA IPC is offered to it afresh
        if "ipc_min_bytes" in launched:
            launched = {k: v for k, v in launched.items() if k != "ipc_min_bytes"} | self.transfer_fields()
        return self._graph_unavailable(self.ask(worker, launched, timeout_s), note)

    @staticmethod
    def _graph_unavailable(reply: dict, note: str) -> dict:
        """A block timed as launched although graphs were asked for: flagged, with the capture's error."""
        reply["graph_note"] = note
        reply["flags"] = sorted(set(reply.get("flags") or []) | {"cuda_graph_unavailable"})
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
                             + "; ".join(alarms[:10]))

    def reference_fails_too(self, wdata: dict, seed: int, timeout_s: float, *, run: bool) -> StepFailed | None:
        """The solution's worker failed: does the reference worker fail on the same inputs (building
        them, or with `run` also running the reference)? Its failure, if any, is the verdict, and
        no solution is blamed for a missing blob or a GPU that cannot run the problem at all."""
        try:
            self.ask(self.reference, {"op": "inputs", "workload": wdata, "seed": seed, "run": run}, timeout_s)
        except StepFailed as exc:
            if exc.status in (Status.MISSING_DATA, Status.INVALID_REFERENCE):
                return exc
        return None

    def trim(self, worker: WorkerProcess, set_bytes: int) -> None:
        """Ask a worker to drop a large input cache before the other worker is timed beside it
        (`worker_calls.handle_trim`); skipped for small inputs, where no cache is worth a request."""
        if set_bytes >= TRIM_MIN_SET_BYTES and worker.alive:
            self.ask(worker, {"op": "trim"}, 60)

    def retire(self, worker: WorkerProcess) -> None:
        """Kill a worker whose process can no longer be trusted; the next load starts a fresh one."""
        worker.kill()
        self._loaded.pop(id(worker), None)

    def load(self, worker: WorkerProcess, problem: Problem, solution: Solution) -> None:
        """Load a solution into a worker; untrusted code always gets a fresh process.

        References are the problem's own code, so one worker process serves the references of
        many problems in turn (starting a CUDA process costs seconds per problem otherwise).
        """
        key = (problem.name, solution.content_hash(), id(problem))
        previous = self._loaded.get(id(worker))
        if previous is not None and previous[0] == key and worker.alive:
            return
        trusted = is_reference(solution, problem)
        reuse = worker.alive and (worker.requests == 0 or (previous is not None and previous[1] and trusted))
        if worker.alive and not reuse:
            worker.stop()  # a module cannot be unloaded: a new solution gets a new process
        if not worker.alive:
            worker.start()
        self._loaded[id(worker)] = (None, trusted)  # from here on the process has seen this code
        self._loads += 1
        message = {"op": "load", "definition": problem.definition.to_dict(), "solution": solution.to_dict(),
                   "work_dir": f"{worker.scratch.name}/load{self._loads}",
                   "compile_timeout_s": self.config.compile_timeout_s,
                   "data_roots": [str(p) for p in self.config.all_data_roots(problem.directory)]}
        self.ask(worker, message, self.config.compile_timeout_s + 60)
        self._loaded[id(worker)] = (key, trusted)
        if worker is self.reference:
            self._reference_job = (problem, solution)
        else:
            self._candidate_job = (problem, solution)
            self.ipc_usable, self.ipc_offered = True, False  # a solution (re)loaded: IPC is offered afresh
        if self.environment is None:
            self.environment = self.ask(worker, {"op": "environment"}, 60)["environment"]

    # -- outputs from the solution's worker to the reference worker --------------------------------

    def transfer_fields(self) -> dict:
        """What a solution's `call`/`time` request carries about CUDA IPC (nothing: bytes only). Never
        put in a request to the reference worker, which must not export its memory."""
        minimum = self.config.ipc_min_bytes
        if not self.device.startswith("cuda") or not self.ipc_usable or not minimum or minimum <= 0:
            return {}
        self.ipc_offered = True
        return {"ipc_min_bytes": int(minimum)}

    def deliver(self, outputs, expected: list | None, timeout_s: float):
        """A solution's outputs as the reference worker's judge takes them: outputs that came as CUDA IPC
        descriptors are copied into the reference worker now (`receive`), or fetched from the solution's
        worker as bytes when IPC cannot carry them; either way the solution's worker then releases its
        exports. `expected`: (dtype, shape) per output position from the definition, when known."""
        import torch

        from solbench.runner import transfer

        if type(outputs) is not list:
            self.retire(self.candidate)
            raise StepFailed(Status.REWARD_HACK, f"the solution's worker sent its outputs as a {type(outputs).__name__}")
        odd = [type(v).__name__ for v in outputs
               if type(v) not in (torch.Tensor, int, float, bool) and not transfer.is_descriptor(v)]
        if odd:  # e.g. a placeholder for a copy the reference worker holds: the harness never sends one
            self.retire(self.candidate)
            raise StepFailed(Status.REWARD_HACK, f"the solution's worker sent outputs that are neither tensors, "
                                                 f"numbers nor IPC descriptors: {odd[:5]}")
        positions = [i for i, value in enumerate(outputs) if transfer.is_descriptor(value)]
        if not positions:
            return outputs
        forged = None
        if not self.ipc_offered:
            forged = "CUDA IPC descriptors arrived although none were asked for"
        try:
            if forged is None:
                specs = [transfer.check_descriptor(outputs[i], expected[i] if expected and i < len(expected) else None)
                         for i in positions]
                if len({s.token for s in specs}) != len(specs):
                    raise transfer.TransferRefused("an export id appears twice")
        except transfer.TransferRefused as exc:
            forged = str(exc)
        if forged is not None:
            self.retire(self.candidate)
            raise StepFailed(Status.REWARD_HACK, f"forged output transfer from the solution's worker: {forged}")
        tokens = [s.token for s in specs]
        replacements = self._receive(outputs, positions, timeout_s) if self.ipc_usable else None
        if replacements is None:
            replacements = self._fetch(tokens, specs, timeout_s)
        self.ask(self.candidate, {"op": "release", "exports": tokens}, min(timeout_s, 60))
        delivered = list(outputs)
        for position, value in zip(positions, replacements):
            delivered[position] = value
        return delivered

    def _receive(self, outputs: list, positions: list[int], timeout_s: float) -> list | None:
        """Placeholders for the reference worker's copies, or None when IPC could not carry them."""
        from solbench.runner import transfer

        try:
            reply = self.ask(self.reference, {"op": "receive", "exports": [outputs[i] for i in positions]}, timeout_s)
        except StepFailed as exc:  # the reference worker failed or died opening them: bytes from here on
            self._ipc_fallback(f"the reference worker failed to open them ({exc.status.value}): {exc.log.strip()[-200:]}")
            return None
        error = reply.get("transfer_error")
        if error == "forged":
            self.retire(self.candidate)
            raise StepFailed(Status.REWARD_HACK, "forged output transfer from the solution's worker: "
                             + str(reply.get("detail", ""))[:500])
        if error is not None or reply.get("received") != sorted(outputs[i][transfer.IPC_KEY] for i in positions):
            if reply.get("healthy") is False:
                self.retire(self.reference)  # its CUDA context is broken: the next request gets a fresh one
            self._ipc_fallback(str(reply.get("detail", "the reference worker did not confirm the copies"))[:300])
            return None
        return [{transfer.RECEIVED_KEY: outputs[i][transfer.IPC_KEY]} for i in positions]

    def _ipc_fallback(self, reason: str) -> None:
        self.ipc_usable = False
        note = f"transfer: CUDA IPC unavailable, outputs sent as bytes ({reason})"
        if note not in self.runtime_warnings:
            self.runtime_warnings.append(note)
        if not self.reference.alive and self._reference_job is not None:
            self.load(self.reference, *self._reference_job)

    def _fetch(self, tokens: list[int], specs: list, timeout_s: float) -> list:
        """The exports as bytes from the solution's worker, checked against their descriptors."""
        import torch

        from solbench.spec import dtypes

        tensors = self.ask(self.candidate, {"op": "fetch", "exports": tokens}, timeout_s).get("tensors")
        if type(tensors) is not list or len(tensors) != len(specs):
            self.retire(self.candidate)
            raise StepFailed(Status.REWARD_HACK, "the solution's worker answered a fetch with something else")
        for tensor, spec in zip(tensors, specs):
            if (type(tensor) is not torch.Tensor or tuple(tensor.shape) != spec.shape
                    or dtypes.name_of(tensor.dtype) != spec.dtype):
                self.retire(self.candidate)
                raise StepFailed(Status.REWARD_HACK, "the solution's worker fetched outputs unlike the ones it exported")
        return tensors


def screen_candidate_failure(message: dict, status, device: str) -> tuple[str, str]:
    """The failure status a solution's worker reported, unless that worker cannot decide it."""
    from solbench.check.anticheat import screen_failure

    plausible = False
    if message.get("op") == "load" and not device.startswith("cuda"):
        from solbench.runner import languages
        from solbench.spec.definition import Definition

        try:
            names = message["solution"]["spec"]["languages"]
            definition = Definition.from_dict(message["definition"])
            bf16 = any(t.dtype == "bfloat16" for t in {**definition.inputs, **definition.outputs}.values())
            # The worker skips what needs CUDA, and Triton in bf16 (its CPU interpreter gets bf16 wrong).
            plausible = all(languages.get(n).needs_cuda for n in names) or ("triton" in names and bf16)
        except Exception:  # noqa: BLE001 - an unknown language is reported by the loader
            plausible = False
    return screen_failure(message.get("op"), status, skip_plausible=plausible)


def is_reference(solution: Solution, problem: Problem) -> bool:
    """The problem's own reference code (trusted), whatever the solution is called."""
    sources = solution.sources
    return (len(sources) == 1 and sources[0].content == problem.definition.reference
            and solution.spec.languages == ("pytorch",) and not solution.spec.destination_passing_style)


def evaluate_problem(session: DeviceSession, problem: Problem, solution: Solution | None,
                     config: RunConfig, *, skip: Callable[[Workload], bool] | None = None,
                     run_seed: int | None = None) -> Iterator[Trace]:
    """Yield one trace per workload of `problem` (the reference is the solution when none is given)."""
    solution = solution or reference_solution(problem.definition)
    run_seed = run_seed if run_seed is not None else (config.seed if config.seed is not None
                                                      else random.SystemRandom().getrandbits(62))
    workloads = problem.workloads[: config.max_workloads] if config.max_workloads else problem.workloads
    from solbench.check.static_scan import scan_solution

    warnings = scan_solution(solution)
    session.runtime_warnings = []
    from solbench.check.anticheat import ProblemFiles

    files = ProblemFiles(problem.directory)  # a solution must leave the problem folder as it found it
    for trace in _evaluate_workloads(session, problem, solution, config, workloads, skip, run_seed, warnings):
        changed = files.changes()
        if changed and trace.solution_hash != reference_solution(problem.definition).content_hash():
            session.retire(session.candidate)
            trace.evaluation.status = Status.REWARD_HACK
            trace.evaluation.performance = None
            trace.evaluation.log = (f"the solution changed the problem folder {problem.directory}: {changed[:10]}\n"
                                    + trace.evaluation.log)[-16000:]
        yield trace


def _evaluate_workloads(session: DeviceSession, problem: Problem, solution: Solution, config: RunConfig,
                        workloads: list[Workload], skip, run_seed: int, warnings: list[str]) -> Iterator[Trace]:
    session.prestart()
    if session.analysis is not None:
        session.costs = {w.uuid: session.analysis.submit(problem.definition, w.axes, w.scalar_values())
                         for w in workloads if not (skip and skip(w))}
    load_failure: StepFailed | None = None
    for workload in workloads:
        if skip is not None and skip(workload):
            continue
        started = time.monotonic()
        if load_failure is None:
            try:
                session.load(session.reference, problem, reference_solution(problem.definition))
            except StepFailed as exc:
                yield make_trace(problem, solution, workload, session, Status.INVALID_REFERENCE,
                                 f"the reference could not be loaded: {exc.log}", started=started, warnings=warnings)
                continue
            try:
                session.load(session.candidate, problem, solution)
            except StepFailed as exc:
                load_failure = exc if exc.status in (Status.COMPILE_ERROR, Status.SKIPPED, Status.REWARD_HACK) else None
                yield make_trace(problem, solution, workload, session, exc.status, exc.log, started=started,
                                 warnings=warnings)
                continue
        else:
            yield make_trace(problem, solution, workload, session, load_failure.status, load_failure.log,
                             started=started, warnings=warnings)
            continue
        try:
            yield evaluate_workload(session, problem, solution, workload, config, run_seed, started, warnings)
        except StepFailed as exc:
            yield make_trace(problem, solution, workload, session, exc.status, exc.log, started=started,
                             warnings=warnings)


def evaluate_workload(session: DeviceSession, problem: Problem, solution: Solution, workload: Workload,
                      config: RunConfig, run_seed: int, started: float, warnings: list[str]) -> Trace:
    from solbench.check.correctness import merge_trials
    from solbench.inputs.seeds import derive_seed

    wdata = workload.to_dict()
    expected = expected_outputs(problem, workload)
    trial_results: list[Correctness] = []
    reference_aliases: set[str] = set()
    set_bytes = declared_set_bytes(problem, workload)
    for trial in range(config.trials):
        seed = derive_seed(run_seed, workload.uuid, "trial", trial)
        session.trim(session.reference, set_bytes)  # multi-GB sets: one worker's copies on the device at a time
        try:
            reply = session.ask(session.candidate, {"op": "call", "workload": wdata, "seed": seed,
                                                    **session.transfer_fields()}, config.timeout_s)
        except StepFailed as exc:
            verdict = (session.reference_fails_too(wdata, seed, config.timeout_s, run=True)
                       if exc.status == Status.RUNTIME_ERROR and trial == 0 else None)
            if verdict is not None:
                raise StepFailed(verdict.status, f"{verdict.log}\n--- the solution failed too ---\n{exc.log[-2000:]}") from None
            raise
        session.trim(session.candidate, set_bytes)
        status, correctness, verdict = judge(session, wdata, seed, reply.get("outputs"), config, expected)
        reference_aliases = set(verdict.get("aliased_inputs", []))
        side_effects = check_side_effects(reply, verdict)
        if side_effects:
            return make_trace(problem, solution, workload, session, Status.REWARD_HACK, side_effects,
                              started=started, warnings=warnings)
        trial_results.append(correctness)
        if status != Status.PASSED:
            merged = merge_trials(trial_results)
            return make_trace(problem, solution, workload, session, status,
                              f"trial {trial}: {correctness.message or status.value}", correctness=merged,
                              started=started, warnings=warnings)
    correctness = merge_trials(trial_results)

    # Timing: distinct input sets, interleaved reference/solution blocks, sampled outputs verified.
    seeds = [derive_seed(run_seed, workload.uuid, "timed", s) for s in range(config.timed_input_sets)]
    timing = timing_message(config, session.device)
    candidate_samples: list[float] = []
    reference_samples: list[float] = []
    host_samples: list[float] = []
    probes: list[dict] = []
    checked = 0
    flags: set[str] = set()
    candidate_info: dict = {}
    time_reference = config.time_reference
    rounds = max(1, config.timing_rounds if session.device.startswith("cuda") else 1)  # CPU timings: a smoke test
    per_round_checks = -(-config.checked_timed_outputs // rounds)
    fresh_budget = ({} if config.fresh_inputs_budget_s is None
                    else {"fresh_inputs_budget_s": config.fresh_inputs_budget_s})
    for _ in range(rounds):
        if time_reference:
            session.trim(session.candidate, set_bytes)
            try:
                ref_reply = session.ask_timed(session.reference, {"op": "time", "workload": wdata, "seeds": seeds,
                                                                  "config": timing, "checked_outputs": 0, **fresh_budget},
                                              config.timeout_s)
                reference_samples += ref_reply["samples_ms"]
                warnings = with_graph_note(warnings, ref_reply, "reference timed as launched: CUDA graph ", 300)
            except StepFailed as exc:
                warnings = warnings + [f"reference timing failed ({exc.status.value}): {exc.log.strip()[-300:]}; "
                                       "no speedup reported"]
                time_reference, reference_samples = False, []
        session.trim(session.reference, set_bytes)
        reply = session.ask_timed(session.candidate, {"op": "time", "workload": wdata, "seeds": seeds, "config": timing,
                                                "checked_outputs": per_round_checks,
                                                "required_outputs": required_checks(problem, workload, per_round_checks),
                                                **fresh_budget, **session.transfer_fields()}, config.timeout_s)
        candidate_samples += reply["samples_ms"]
        warnings = with_graph_note(warnings, reply, "CUDA graph: ", 400)
        host_samples += [float(t) for t in reply.get("host_ms") or []]
        probes += [reply["probe"]] if isinstance(reply.get("probe"), dict) else []
        flags.update(reply.get("flags", []))
        candidate_info = reply
        extra = sorted(set(reply.get("aliased_inputs", [])) - reference_aliases)
        if extra:
            return make_trace(problem, solution, workload, session, Status.REWARD_HACK,
                              f"timed calls returned views of inputs (or broadcast views) {extra}, which the reference does not do",
                              started=started, warnings=warnings)
        session.trim(session.candidate, set_bytes)
        for index, input_seed, outputs in reply["sampled"]:
            if type(input_seed) is not int or not 0 <= input_seed < 2**63:
                raise StepFailed(Status.REWARD_HACK, f"sampled timed call {index} names no valid input seed")
            status, result, _ = judge(session, wdata, input_seed, outputs, config, expected)
            checked += 1
            if status != Status.PASSED:
                correctness.checked_timed_iterations = checked
                return make_trace(problem, solution, workload, session, status,
                                  f"the output of timed iteration {index} is wrong although the correctness "
                                  f"trials passed (answers cached or work skipped while timed?): "
                                  f"{result.message or status.value}", correctness=result, started=started,
                                  warnings=warnings)
    correctness.checked_timed_iterations = checked

    from solbench.timing.stats import summarize

    method = "cuda_events" if session.device.startswith("cuda") else "cpu_clock"
    latency = summarize(candidate_samples, warmup=candidate_info.get("warmup", 0), method=method,
                        target_rel_ci=timing.get("target_rel_ci"))
    latency.flags = sorted(set(latency.flags) | flags)
    reference_latency = (summarize(reference_samples, method=method, target_rel_ci=timing.get("target_rel_ci"))
                         if reference_samples else None)
    speedup = (reference_latency.median_ms / latency.median_ms
               if reference_latency and latency.median_ms > 0 else None)
    performance = Performance(latency.median_ms, reference_latency.median_ms if reference_latency else None,
                              speedup, latency, reference_latency, *launch_and_busy_ms(host_samples, probes))
    cupti_failures = sorted({str(p.get("cupti"))[:200] for p in probes if str(p.get("cupti", "")).startswith("failed")})
    if cupti_failures:
        warnings = warnings + [f"CUPTI {cupti_failures[0]}: no GPU-busy time, escaped work checked by synchronisation only"]
    clocks = (candidate_info.get("clocks_before"), candidate_info.get("clocks_after"))
    baselines = {"eager": performance.reference_latency_ms, "published": config.baseline_ms.get(workload.uuid),
                 "shipped": None, "compile": None}
    if (config.baseline_shipped and problem.baseline_path is not None) or config.baseline_compile:
        session.trim(session.candidate, set_bytes)
    if config.baseline_shipped and problem.baseline_path is not None:
        baselines["shipped"], warnings = time_shipped_baseline(session, problem, wdata, seeds, timing, config,
                                                               method, warnings)
    if config.baseline_compile:
        try:
            reply = session.ask_timed(session.reference, {"op": "time_compiled", "workload": wdata, "seeds": seeds,
                                                          "config": timing, "checked_outputs": 0},
                                      config.compile_timeout_s)
            baselines["compile"] = summarize(reply["samples_ms"], method=method).median_ms
        except StepFailed as exc:
            warnings = warnings + [f"torch.compile baseline unavailable ({exc.status.value}): {exc.log.strip()[-300:]}"]
    measured = [t for t in baselines.values() if t]
    sol, impossible, notes = speed_of_light(session, problem, workload, config, latency.median_ms,
                                            min(measured) if measured else None)
    if sol is not None:
        sol["baselines_ms"] = baselines  # T_b is the fastest of these
    status = Status.REWARD_HACK if impossible else Status.PASSED
    return make_trace(problem, solution, workload, session, status, impossible or "", correctness=correctness,
                      performance=performance, started=started, warnings=warnings + notes, clocks=clocks, sol=sol)


def time_shipped_baseline(session: DeviceSession, problem: Problem, wdata: dict, seeds: list, timing: dict,
                          config: RunConfig, method: str, warnings: list[str]) -> tuple[float | None, list[str]]:
    """The median time of the problem's shipped optimised baseline, timed in the reference worker
    after it agreed with the reference; None (and a warning saying why) when it is unavailable."""
    from solbench.spec.problem import baseline_solution
    from solbench.timing.stats import summarize

    try:
        solution = baseline_solution(problem)
        reply = session.ask_timed(session.reference, {"op": "time_baseline", "workload": wdata, "seeds": seeds,
                                                      "config": timing, "checked_outputs": 0,
                                                      "baseline": solution.to_dict(),
                                                      "compile_timeout_s": config.compile_timeout_s},
                                  config.compile_timeout_s)
    except SpecError as exc:
        return None, warnings + [f"shipped baseline unusable: {exc}"]
    except StepFailed as exc:
        return None, warnings + [f"shipped baseline unavailable ({exc.status.value}): {exc.log.strip()[-300:]}"]
    return summarize(reply["samples_ms"], method=method).median_ms, warnings


def launch_and_busy_ms(host_samples: list[float], probes: list[dict]) -> tuple[float | None, ...]:
    """Median host launch time, and the CUPTI GPU-busy time (union of the call's GPU activity; the
    first-to-last span from workers that report no union) and kernel-time sum of the probe calls.

    These sit beside the latency (device time with the launch queued ahead, which the score uses):
    host time says whether the call is launch-bound on this CPU, GPU-busy time whether the event time
    holds idle gaps. Values from the solution's worker are plain numbers; anything else is dropped.
    """
    def median(values) -> float | None:
        nums = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v) and v >= 0]
        return statistics.median(nums) if nums else None

    spans = [v for p in probes if p.get("cupti") == "used" for v in p.get("busy_ms") or p.get("span_ms") or []]
    kernels = [v for p in probes if p.get("cupti") == "used" for v in p.get("kernel_ms") or []]
    return median(host_samples), median(spans), median(kernels)


def speed_of_light(session: DeviceSession, problem: Problem, workload: Workload, config: RunConfig,
                   latency_ms: float, baseline_ms: float | None) -> tuple[dict | None, str | None, list[str]]:
    """The trace's speed-of-light record, and a rejection message when the time is impossible.

    The record uses `--hw` when given (e.g. B200 bounds on any machine); rejection always uses the
    running GPU's own spec, since only that one bounds what was measured here.
    """
    from solbench.sol.analyser import analyse, sol_time_ms
    from solbench.sol.hardware import detect_spec, load_spec
    from solbench.sol.record import sol_record
    from solbench.sol.reject import faster_than_light

    notes: list[str] = []
    try:
        future = session.costs.get(workload.uuid)
        cost = (future.result(timeout=300) if future is not None
                else analyse(problem.definition, workload.axes, scalars=workload.scalar_values()))
    except Exception as exc:  # noqa: BLE001 - an analysis gap must not lose the measurement
        return None, None, [f"speed-of-light analysis failed: {type(exc).__name__}: {exc}"]
    running = None
    if session.device.startswith("cuda"):
        try:
            running = detect_spec(int(session.device.split(":")[1]) if ":" in session.device else 0)
        except Exception as exc:  # noqa: BLE001 - unknown GPU: say so, never guess
            notes.append(f"no hardware spec for this GPU ({exc}); no faster-than-light check")
    try:
        hw = load_spec(config.hw) if config.hw else running
    except Exception as exc:  # noqa: BLE001
        return None, None, notes + [f"hardware spec {config.hw!r}: {exc}"]
    impossible = faster_than_light(latency_ms, cost, running) if running is not None else None
    if hw is None:
        return None, impossible, notes
    record = sol_record(cost, sol_time_ms(cost, hw), hw, latency_ms, baseline_ms)
    if cost.unknown_ops:
        notes.append(f"speed-of-light analysis did not understand: {', '.join(cost.unknown_ops)}")
    return record, impossible, notes


def expected_outputs(problem: Problem, workload: Workload) -> list | None:
    """(dtype, shape or None for a scalar) per declared output of this workload, or None when the
    axes do not resolve here (the workers report that)."""
    definition = problem.definition
    try:
        shapes = definition.output_shapes(definition.resolve_axes(workload.axes))
    except Exception:  # noqa: BLE001 - a bad workload is reported by the workers, with their message
        return None
    return [(spec.dtype, shapes.get(name)) for name, spec in definition.outputs.items()]


def declared_set_bytes(problem: Problem, workload: Workload, which: str = "inputs") -> int:
    """The bytes of one set of `which` ("inputs" or "outputs") as the definition declares it (0 where
    the axes do not resolve here)."""
    from solbench.spec import dtypes

    definition = problem.definition
    tensors = definition.inputs if which == "inputs" else definition.outputs
    try:
        axes = definition.resolve_axes(workload.axes)
        shapes = definition.input_shapes(axes) if which == "inputs" else definition.output_shapes(axes)
    except Exception:  # noqa: BLE001 - a bad workload is reported by the workers, with their message
        return 0
    return sum(math.prod(shape) * dtypes.storage_bits(tensors[name].dtype) // 8
               for name, shape in shapes.items() if shape is not None)


# Outputs up to this size are always kept for every sampled check; above it the solution's worker may
# keep fewer (at least one) when a quarter of its free memory holds no more, and the trace says so.
ALWAYS_KEPT_OUTPUT_BYTES = 1 << 30


def required_checks(problem: Problem, workload: Workload, wanted: int) -> int:
    out_bytes = declared_set_bytes(problem, workload, "outputs")
    return wanted if out_bytes * wanted <= ALWAYS_KEPT_OUTPUT_BYTES else min(wanted, 1)


def judge(session: DeviceSession, wdata: dict, seed: int, outputs: list, config: RunConfig,
          expected: list | None = None):
    """Compare a solution's outputs with the reference's for the same seed, in the reference worker.

    The reference worker regenerates the inputs, runs the reference and compares on its device:
    large outputs are compared on the GPU, and reference outputs never exist anywhere the
    solution's process can reach. Outputs that came as CUDA IPC descriptors are first copied into
    the reference worker (`DeviceSession.deliver`).
    """
    outputs = session.deliver(outputs, expected, config.timeout_s)
    try:
        reply = session.ask(session.reference, {"op": "judge", "workload": wdata, "seed": seed, "outputs": outputs},
                            config.timeout_s)
    except StepFailed as exc:
        status = exc.status if exc.status == Status.MISSING_DATA else Status.INVALID_REFERENCE
        raise StepFailed(status, f"the reference failed ({exc.status.value}): {exc.log}") from None
    correctness = Correctness.from_dict(reply["correctness"])
    return Status(reply["status"]), correctness, reply


def check_side_effects(candidate_reply: dict, reference_reply: dict) -> str | None:
    """Writing into inputs, or returning views of them, is allowed only where the reference does it
    (e.g. an in-place KV-cache update); anywhere else it is a way to smuggle state or answers."""
    for key, what in (("mutated_inputs", "wrote into its inputs"), ("aliased_inputs", "returned views of its inputs (or broadcast views)")):
        extra = sorted(set(candidate_reply.get(key, [])) - set(reference_reply.get(key, [])))
        if extra:
            return f"the solution {what} {extra}, which the reference does not do"
    return None


def with_graph_note(warnings: list[str], reply: dict, prefix: str, limit: int) -> list[str]:
    """The warnings plus, once per workload, why a block asked to replay a CUDA graph was timed as
    launched (`DeviceSession.ask_timed` puts the capture's error in the reply)."""
    note = reply.get("graph_note")
    if not isinstance(note, str) or not note:
        return warnings
    text = f"{prefix}{note[:limit]}"
    return warnings if text in warnings else warnings + [text]


def timing_message(config: RunConfig, device: str) -> dict:
    """The timer settings sent to workers: the device defaults with the run's overrides."""
    from solbench.timing.config import TimingConfig

    base = TimingConfig.for_device(device)
    data = asdict(base)
    if config.warmup is not None:
        data["warmup"] = config.warmup
    if config.iters is not None:
        data["iters"] = config.iters
        data["max_iters"] = max(data.get("max_iters", config.iters), config.iters)
    if config.target_rel_ci is not None:
        data["target_rel_ci"] = config.target_rel_ci
    if config.max_time_s is not None:
        data["max_time_s"] = config.max_time_s
    data["adaptive"] = config.adaptive and data.get("adaptive", True)
    data["launch_hold"] = config.launch_hold and data.get("launch_hold", True)
    data["cuda_graph"] = bool(config.cuda_graphs) and device.startswith("cuda")
    return data


def make_trace(problem: Problem, solution: Solution, workload: Workload, session: DeviceSession, status: Status,
               log: str, *, correctness: Correctness | None = None, performance: Performance | None = None,
               started: float, warnings: list[str], clocks: tuple = (None, None), sol: dict | None = None) -> Trace:
    env_data = dict(session.environment or {"device": "cuda" if session.device.startswith("cuda") else "cpu"})
    env_data["clocks_start"], env_data["clocks_end"] = clocks
    environment = Environment.from_dict(env_data)
    evaluation = Evaluation(status=status, timestamp=datetime.now(UTC).isoformat(timespec="seconds"),
                            log=log[-16000:], environment=environment,
                            correctness=correctness,
                            performance=performance if status in (Status.PASSED, Status.REWARD_HACK) else None,
                            sol=sol, warnings=list(warnings) + list(session.runtime_warnings),
                            seconds=round(time.monotonic() - started, 3))
    return Trace(definition=problem.name, workload=workload.to_dict(), solution=solution.name,
                 solution_hash=solution.content_hash(), evaluation=evaluation)

