"""Every message between the orchestrator and a worker: one typed request and one typed reply per op.

The orchestrator sends requests and decodes replies; a worker decodes requests and sends replies. A
reply from a solution's worker is data from an adversary, so decoding is strict: the protocol version
must match, the op must be known, every required field must be there with the declared type, and no
other field may appear. What a reply means (are its samples plausible? is the status one the worker
may decide?) is judged afterwards by `solbench.check.anticheat`; here only its form is.

`solbench.protocol.codec` turns them into and out of their dict form. On the wire
(`solbench.protocol.framing`) a message is a dict: `{"v": PROTOCOL_VERSION, "op": ..., "id":
request id, ...fields}`; a reply adds `"ok"` and `"audit"` (what the solution's audit hook noticed). A
failed request comes back as a `Failed` reply whatever its op. Fields of a format's type (`Workload`,
`Definition`, `Solution`, `Correctness`, `EnvironmentRecord`, `TimingConfig`) travel as their dict form
and are validated by their model on decoding. Tensors travel only in `Values` fields (and inside a kept
call's outputs in `Timed.sampled`): the framing carries their bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from solbench.spec.definition import Definition
from solbench.spec.solution import Solution
from solbench.spec.trace import Correctness
from solbench.spec.trace import Environment as EnvironmentRecord
from solbench.spec.workload import Workload
from solbench.timing.config import TimingConfig

PROTOCOL_VERSION = 1

# Call arguments and outputs: tensors (their bytes carried by the framing), numbers, None, nested lists.
Values = list[Any]
# A reading of named numbers or notes: NVML clocks, the escaped-work probe's findings.
Readings = dict[str, Any]
# A worker whose audit hook could not deliver an alarm (the channel jammed, closed or replaced) ends with
# this exit code; from a solution's worker it is a REWARD_HACK.
ALARM_LOST_EXIT = 86


# -- requests (orchestrator -> worker) ---------------------------------------------------------------

@dataclass(frozen=True)
class Request:
    OP: ClassVar[str] = ""


@dataclass(frozen=True)
class Load(Request):
    """Load a solution (or the reference) into the worker; compiled languages build here."""

    OP: ClassVar[str] = "load"
    definition: Definition
    solution: Solution
    work_dir: str
    compile_timeout_s: float = 300.0
    data_roots: list[str] = field(default_factory=list)
    # the folders of those the worker may read (worker/reads.py): the data roots when a workload takes blobs
    readable_roots: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Call(Request):
    """One correctness trial: inputs from `seed`, one call, the outputs back."""

    OP: ClassVar[str] = "call"
    workload: Workload
    seed: int
    ipc_min_bytes: int | None = None  # outputs this large go back as CUDA IPC descriptors
    profile: str = "standard"  # the inputs' profile (solbench.inputs.profiles): part of what the seed means


@dataclass(frozen=True)
class Judge(Request):
    """In the reference worker: run the reference on `seed`'s inputs and compare `outputs` with it."""

    OP: ClassVar[str] = "judge"
    workload: Workload
    seed: int
    outputs: Values
    profile: str = "standard"
    strict: bool = False  # numerics flags fail the outputs (check.correctness)


@dataclass(frozen=True)
class Inputs(Request):
    """In the reference worker: build `seed`'s inputs (and with `run`, run the reference on them)."""

    OP: ClassVar[str] = "inputs"
    workload: Workload
    seed: int
    run: bool = False
    profile: str = "standard"


@dataclass(frozen=True)
class Time(Request):
    """One timed block of the loaded code."""

    OP: ClassVar[str] = "time"
    workload: Workload
    seeds: list[int]
    config: TimingConfig
    checked_outputs: int = 3  # sampled timed calls whose outputs come back for the judge
    required_outputs: int | None = None  # the fewest of them acceptable (None: all)
    fresh_inputs_budget_s: float | None = None  # None: the worker's default; 0: rotate `seeds`' sets
    ipc_min_bytes: int | None = None
    probe: bool = True  # the escaped-work probe after the block (CUDA)
    max_slots: int = 8
    # The orchestrator's key for this block's input seeds (`inputs.seeds.call_seed`): call i's seed is
    # derived from it, i and a nonce the worker draws at the call, so the orchestrator recomputes every
    # checked call's seed instead of reading it from the solution's process.
    block_key: int = 0
    # Whether calls past the input budget may reuse recent sets: the orchestrator allows it only where the
    # reference's own block had to (a fact from a trusted process), never on the solution worker's word.
    reuse_inputs: bool = True
    # Whether the block may rotate the requested sets (inputs that do not depend on the seed): only where the
    # reference's block found so, or the orchestrator asked for it (`fresh_inputs_budget_s` 0).
    fixed_inputs: bool = True
    # Inputs the reference itself returns views of (an in-place cache update): a kept call that returns
    # one is not checked for writing into it (that would rebuild a maybe multi-GB set per kept call).
    reference_views: list[str] = field(default_factory=list)
    # Whether a captured graph is checked on an input set other than the capture's before it is timed
    # (`worker.graphs`). The solution's are: its kept outputs are judged. Trusted code (the reference and the
    # baselines, whose timed outputs are not judged) runs the same kernels either way: its check is skipped.
    check_graph_values: bool = True


@dataclass(frozen=True)
class TimeCompiled(Time):
    """In the reference worker: a timed block of `torch.compile` of the reference."""

    OP: ClassVar[str] = "time_compiled"


@dataclass(frozen=True)
class TimeBaseline(Time):
    """In the reference worker: a timed block of the problem's shipped optimised baseline."""

    OP: ClassVar[str] = "time_baseline"
    baseline: Solution | None = None
    compile_timeout_s: float = 300.0


@dataclass(frozen=True)
class Environment(Request):
    OP: ClassVar[str] = "environment"


@dataclass(frozen=True)
class Receive(Request):
    """In the reference worker: copy outputs exported by CUDA IPC (descriptors, checked there again)."""

    OP: ClassVar[str] = "receive"
    exports: list[dict[str, Any]]  # CUDA IPC descriptors (protocol.descriptors checks each)


@dataclass(frozen=True)
class Release(Request):
    """In the solution's worker: drop exports the reference worker has copied."""

    OP: ClassVar[str] = "release"
    exports: list[int]


@dataclass(frozen=True)
class Fetch(Request):
    """In the solution's worker: exports as bytes, when IPC could not carry them."""

    OP: ClassVar[str] = "fetch"
    exports: list[int]


@dataclass(frozen=True)
class Trim(Request):
    """Drop a large input cache before the other worker is timed beside this one."""

    OP: ClassVar[str] = "trim"
    min_bytes: int | None = None


@dataclass(frozen=True)
class Ping(Request):
    """Answered only once every earlier reply went out: the orchestrator's sequence check."""

    OP: ClassVar[str] = "ping"


@dataclass(frozen=True)
class Shutdown(Request):
    OP: ClassVar[str] = "shutdown"


# -- replies (worker -> orchestrator) -----------------------------------------------------------------

@dataclass
class Reply:
    OP: ClassVar[str] = ""
    ok: ClassVar[bool] = True
    audit: list[str] = field(default_factory=list, kw_only=True)  # the solution's audit hook's notes
    handler_s: float = field(default=0.0, kw_only=True)  # seconds the worker spent on the request


@dataclass
class Failed(Reply):
    """Any request that failed. `capture_failed`: a timed block whose call could not be captured as a
    CUDA graph (the orchestrator restarts the worker and times the block as launched)."""

    ok: ClassVar[bool] = False
    status: str
    log: str = ""
    capture_failed: str | None = None


@dataclass
class Loaded(Reply):
    OP: ClassVar[str] = "load"


@dataclass
class Called(Reply):
    OP: ClassVar[str] = "call"
    outputs: Values
    call_s: float
    aliased_inputs: list[str] = field(default_factory=list)
    mutated_inputs: list[str] = field(default_factory=list)


@dataclass
class Judged(Reply):
    OP: ClassVar[str] = "judge"
    status: str
    correctness: Correctness
    aliased_inputs: list[str] = field(default_factory=list)
    mutated_inputs: list[str] = field(default_factory=list)
    phases_s: dict[str, float] = field(default_factory=dict)  # inputs, reference, compare seconds


@dataclass
class InputsBuilt(Reply):
    OP: ClassVar[str] = "inputs"


@dataclass
class Timed(Reply):
    OP: ClassVar[str] = "time"
    samples_ms: list[float]
    warmup: int
    wall_s: float
    # [call index, source, nonce, outputs] per kept call: `source` is the call that drew the input set (the
    # call itself, or an earlier one whose set it reused); nonce None: the requested `seeds` rotated by index.
    sampled: list[list[Any]]
    stop_reason: str = ""
    flags: list[str] = field(default_factory=list)
    slots: int = 1
    clocks_before: Readings | None = None
    clocks_after: Readings | None = None
    energy_mj_per_call: float | None = None
    host_ms: list[float] = field(default_factory=list)
    hold_ms: float | None = None
    exposed: int = 0
    probe_calls: int = 0  # calls made after the timed ones for the escaped-work probe (not samples)
    probe: Readings | None = None
    aliased_inputs: list[str] = field(default_factory=list)
    written_inputs: list[str] = field(default_factory=list)  # inputs a kept call returned views of and wrote into
    phases_s: dict[str, float] = field(default_factory=dict)  # setup, capture, warmup, loop seconds (and inputs_in_loop)
    # Set by the orchestrator, never on the wire: why a block asked to replay a CUDA graph was timed as
    # launched (`orchestrator.session.DeviceSession.ask_timed`).
    graph_note: str | None = field(default=None, init=False, repr=False)


@dataclass
class EnvironmentRead(Reply):
    OP: ClassVar[str] = "environment"
    environment: EnvironmentRecord


@dataclass
class Received(Reply):
    """`transfer_error`: "forged" (a descriptor the harness never writes) or "unavailable" (bytes must
    carry it; `healthy` says whether this worker's CUDA context survived)."""

    OP: ClassVar[str] = "receive"
    received: list[int] = field(default_factory=list)
    transfer_error: str | None = None
    detail: str = ""
    healthy: bool | None = None
    phases_s: dict[str, float] = field(default_factory=dict)  # ipc_open, ipc_copy, ipc_close seconds


@dataclass
class Released(Reply):
    OP: ClassVar[str] = "release"
    held: int = 0


@dataclass
class Fetched(Reply):
    OP: ClassVar[str] = "fetch"
    tensors: Values


@dataclass
class Trimmed(Reply):
    OP: ClassVar[str] = "trim"
    freed_bytes: int
    held_bytes: int


@dataclass
class Pong(Reply):
    OP: ClassVar[str] = "ping"


@dataclass
class Stopped(Reply):
    OP: ClassVar[str] = "shutdown"


REQUESTS: dict[str, type[Request]] = {cls.OP: cls for cls in (
    Load, Call, Judge, Inputs, Time, TimeCompiled, TimeBaseline, Environment, Receive, Release, Fetch, Trim,
    Ping, Shutdown)}
REPLIES: dict[str, type[Reply]] = {cls.OP: cls for cls in (
    Loaded, Called, Judged, InputsBuilt, Timed, EnvironmentRead, Received, Released, Fetched, Trimmed, Pong,
    Stopped)}
# The timed variants answer like a plain timed block.
REPLIES["time_compiled"] = REPLIES["time_baseline"] = Timed
