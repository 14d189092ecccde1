"""Where a workload's seconds go: the account behind a trace's `phases_s` (docs/timing.md, "The cost of a
verdict, and where it goes").

Each request to a worker is charged to a phase by its op. The part of the wait the worker reports as its
own handling goes to that phase (a timed block's reply splits it further into `timing.*`); the rest of the
wait goes to "startup" at a worker's first request (the process still starting), else to "channel".
Some keys are details inside a part, not parts themselves (`is_part`): the timed GPU seconds, the input
draws inside the timed loop, and what the reference worker reports of judging (`judge.*`).
"""

from __future__ import annotations

from solbench.protocol import messages as msg

PHASE_OF_OP = {"load": "load", "environment": "load", "shutdown": "load", "call": "trials", "inputs": "trials",
               "judge": "judge", "receive": "judge", "release": "judge", "fetch": "judge", "time": "timing",
               "ping": "timing", "time_compiled": "baselines", "time_baseline": "baselines", "trim": "trim"}
BLOCK_PHASES = ("setup", "capture", "warmup", "loop", "probe", "checks", "export", "release")  # docs/timing.md
# What the reference worker reports of a judge and of a receive (kept as `judge.<name>`).
JUDGE_DETAILS = {"judge": ("inputs", "reference", "compare"), "receive": ("ipc_open", "ipc_copy", "ipc_close")}


def is_part(phase: str) -> bool:
    """Whether a `phases_s` key is a part of the workload's `seconds` (the others are details inside one)."""
    return phase not in ("gpu_timed", "timing.inputs_in_loop") and not phase.startswith("judge.")


class PhaseAccount:
    """Seconds per phase of the current workload."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, name: str, seconds: float) -> None:
        if seconds > 0:
            self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def take(self) -> dict[str, float]:
        """The account so far, and a fresh one for the next workload."""
        taken, self.seconds = self.seconds, {}
        return taken

    def account(self, request: msg.Request, reply: msg.Reply | None, waited_s: float, fresh: bool = False) -> None:
        """Charge one request: `waited_s` from asking to the reply (None: no usable reply came)."""
        phase = PHASE_OF_OP.get(request.OP, "other")
        worked_s = min(max(reply.handler_s, 0.0), waited_s) if reply is not None else 0.0
        parts = dict(reply.phases_s) if isinstance(reply, msg.Timed) and phase == "timing" else {}
        inside = 0.0
        for name in BLOCK_PHASES:
            seconds = parts.get(name)
            if isinstance(seconds, (int, float)) and 0 <= seconds <= worked_s - inside:
                self.add(f"timing.{name}" if name != "probe" else "probe", seconds)
                inside += seconds
        inputs_s = parts.get("inputs_in_loop")
        if isinstance(inputs_s, (int, float)) and inputs_s > 0:  # a part of the loop and the warm-up, not beside them
            self.add("timing.inputs_in_loop", min(inputs_s, worked_s))
        self.add(phase if not parts else "timing.other", worked_s - inside)
        self.add("startup" if fresh else "channel", waited_s - worked_s)
        if phase == "judge" and reply is not None:
            self._judge_details(request.OP, reply, worked_s)

    def _judge_details(self, op: str, reply: msg.Reply, worked_s: float) -> None:
        """`judge.<request>` for the transfer requests, `judge.<part>` for the reference worker's own parts."""
        if op != "judge":
            self.add(f"judge.{op}", worked_s)
        parts = getattr(reply, "phases_s", None)
        if isinstance(parts, dict):
            for name in JUDGE_DETAILS.get(op, ()):
                seconds = parts.get(name)
                if isinstance(seconds, (int, float)) and 0 <= seconds <= worked_s:
                    self.add(f"judge.{name}", seconds)
