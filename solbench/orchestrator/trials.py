"""Correctness trials: the solution's worker calls the solution on fresh inputs, the reference worker
judges the outputs against the reference on the same inputs (regenerated from the same seed).

The judge runs in the reference worker: large outputs are compared on its GPU, and reference outputs
never exist anywhere the solution's process can reach. Outputs that came as CUDA IPC descriptors are
first copied into the reference worker (`delivery.deliver`).
"""

from __future__ import annotations

from solbench.check.correctness import merge_trials
from solbench.inputs.profiles import STANDARD, trial_profile
from solbench.inputs.seeds import derive_seed
from solbench.orchestrator.delivery import deliver
from solbench.orchestrator.session import DeviceSession, StepFailed
from solbench.orchestrator.sizes import declared_set_bytes, expected_outputs
from solbench.orchestrator.verdict import WorkloadRun
from solbench.protocol import messages as msg
from solbench.spec.trace import Correctness, Status
from solbench.spec.workload import Workload


def judge(session: DeviceSession, workload: Workload, seed: int, outputs: list, timeout_s: float,
          expected: list | None = None, *, profile: str = STANDARD,
          strict: bool = False) -> tuple[Status, Correctness, msg.Judged]:
    """Compare a solution's outputs with the reference's for the same seed and input profile, in the
    reference worker; `strict`: numerics flags fail them."""
    outputs = deliver(session, outputs, expected, timeout_s)
    try:
        reply = session.ask(session.reference, msg.Judge(workload=workload, seed=seed, outputs=outputs,
                                                         profile=profile, strict=strict), timeout_s)
    except StepFailed as exc:
        if out_of_memory(exc.log):  # the machine's limit, not a broken reference: it says nothing of the problem
            raise StepFailed(Status.RUNTIME_ERROR, "the GPU ran out of memory while the reference judged the "
                             f"outputs (beside the solution's worker):\n{exc.log}") from None
        status = exc.status if exc.status == Status.MISSING_DATA else Status.INVALID_REFERENCE
        raise StepFailed(status, f"the reference failed ({exc.status.value}): {exc.log}") from None
    return Status(reply.status), reply.correctness, reply


def out_of_memory(log: str) -> bool:
    """Whether a worker's failure log is torch's out-of-memory error."""
    return "OutOfMemoryError" in log or "CUDA out of memory" in log


def side_effects(candidate: msg.Called, reference: msg.Judged) -> str | None:
    """Writing into inputs is allowed only where the reference does it (e.g. an in-place KV-cache update);
    anywhere else it is a way to smuggle state or answers. Returning views of inputs is not refused: the
    outputs were copied when the call returned and are judged by value (`aliases_note` says so)."""
    extra = sorted(set(candidate.mutated_inputs) - set(reference.mutated_inputs))
    if extra:
        return f"the solution wrote into its inputs {extra}, which the reference does not do"
    return None


def view_flags(extra_views: set[str]) -> list[str]:
    """Flags for views the solution returned where the reference does not: allowed, judged by value (the kept
    outputs are copies taken before any refill), and still bounded by the speed of light."""
    broadcast = {v for v in extra_views if v.endswith("(broadcast view)")}
    return (["output_aliases_input"] if extra_views - broadcast else []) + (["output_broadcast_view"] if broadcast else [])


def aliases_note(candidate: msg.Called, reference: msg.Judged) -> str | None:
    """A warning when the solution returned views of its inputs (or broadcast views) where the reference
    does not: allowed, judged by value; the timed blocks flag it too."""
    extra = set(candidate.aliased_inputs) - set(reference.aliased_inputs)
    return f"{', '.join(view_flags(extra))}: the solution returned views of its inputs (or broadcast views) " \
           f"{sorted(extra)}, which the reference does not; judged by value" if extra else None


def run_trials(run: WorkloadRun) -> tuple[Correctness, set[str]]:
    """The merged correctness of every trial, and the inputs the reference itself returns views of;
    the workload ends (`WorkloadEnded`) at the first trial that fails."""
    session, config = run.session, run.config
    expected = expected_outputs(run.problem, run.workload)
    set_bytes = declared_set_bytes(run.problem, run.workload)
    results: list[Correctness] = []
    reference_aliases: set[str] = set()
    for trial in range(config.trials):
        seed = derive_seed(run.run_seed, run.workload.uuid, "trial", trial)
        profile = trial_profile(trial, config.trials)  # rows and columns of different scales after the first
        session.trim(session.reference, set_bytes)  # multi-GB sets: one worker's copies on the device at a time
        session.prefetch_inputs(run.workload, seed, profile, set_bytes)  # the judge's inputs, built meanwhile
        try:
            reply = session.ask(session.candidate, msg.Call(workload=run.workload, seed=seed, profile=profile,
                                                            ipc_min_bytes=session.ipc_min_bytes()), config.timeout_s)
        except StepFailed as exc:
            verdict = (session.reference_fails_too(run.workload, seed, config.timeout_s, run=True, profile=profile)
                       if exc.status == Status.RUNTIME_ERROR and trial == 0 else None)
            if verdict is not None:
                raise StepFailed(verdict.status, f"{verdict.log}\n--- the solution failed too ---\n{exc.log[-2000:]}") from None
            raise
        run.call_s = max(run.call_s, reply.call_s if reply.call_s >= 0 else 0.0)
        session.trim(session.candidate, set_bytes)
        status, correctness, verdict = judge(session, run.workload, seed, reply.outputs, config.timeout_s, expected,
                                             profile=profile, strict=config.strict)
        reference_aliases = set(verdict.aliased_inputs)
        problem = side_effects(reply, verdict)
        if problem:
            raise run.end(Status.REWARD_HACK, problem)
        note = aliases_note(reply, verdict)
        if note:
            run.warn_once(note)
        results.append(correctness)
        if status != Status.PASSED:
            raise run.end(status, f"trial {trial}: {correctness.message or status.value}",
                          correctness=merge_trials(results))
    return merge_trials(results), reference_aliases
