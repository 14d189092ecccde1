"""Traces: one JSON object per (solution, workload) evaluation.

Layout follows SOL-ExecBench's trace (`definition`, `workload`, `solution`, `evaluation{status,
environment, timestamp, log, correctness, performance}`) so existing readers keep working; solbench
adds latency statistics, the speed-of-light analysis and anti-cheat warnings. `schema` versions the
format; older lines are migrated on reading (`trace_versions`); docs/formats.md lists every change. The
classes are typed models (`spec.model`): reading ignores keys it does not know (other tools' additions),
and every field it knows must have its declared type.
"""

from __future__ import annotations

from dataclasses import field
from enum import StrEnum
from typing import Any

from pydantic import Field, computed_field, field_validator, model_validator
from pydantic.dataclasses import dataclass

from solbench.spec.model import LENIENT, FiniteFloat, FormatModel, absent
from solbench.spec.sol_record import SolRecord
from solbench.spec.trace_versions import TRACE_SCHEMA, migrate
from solbench.spec.workload import Workload


class Status(StrEnum):
    PASSED = "PASSED"
    INCORRECT_SHAPE = "INCORRECT_SHAPE"
    INCORRECT_DTYPE = "INCORRECT_DTYPE"
    INCORRECT_NUMERICAL = "INCORRECT_NUMERICAL"
    RUNTIME_ERROR = "RUNTIME_ERROR"
    COMPILE_ERROR = "COMPILE_ERROR"
    TIMEOUT = "TIMEOUT"
    REWARD_HACK = "REWARD_HACK"
    INVALID_REFERENCE = "INVALID_REFERENCE"
    MISSING_DATA = "MISSING_DATA"
    SKIPPED = "SKIPPED"  # cannot run on this machine (e.g. CUDA C++ without a GPU); not a failure

    @property
    def failed(self) -> bool:
        return self not in (Status.PASSED, Status.SKIPPED)

    def __str__(self) -> str:
        return self.value


@dataclass(config=LENIENT)
class LatencyStats(FormatModel):
    """Per-iteration latencies of one timed block, summarised; every figure in milliseconds."""

    median_ms: FiniteFloat
    mean_ms: FiniteFloat
    min_ms: FiniteFloat
    max_ms: FiniteFloat
    stdev_ms: FiniteFloat
    n: int
    ci_low_ms: FiniteFloat = None  # confidence interval of the median
    ci_high_ms: FiniteFloat = None
    ci_level: FiniteFloat = None
    iqr_ms: FiniteFloat = None
    warmup: int = 0
    method: str = ""  # "cuda_events", "cupti", "cpu_clock"
    flags: list[str] = field(default_factory=list)  # e.g. "wide_ci", "throttled"

    @property
    def rel_ci_halfwidth(self) -> float | None:
        if self.ci_low_ms is None or self.ci_high_ms is None or self.median_ms <= 0:
            return None
        return (self.ci_high_ms - self.ci_low_ms) / 2 / self.median_ms


@dataclass(config=LENIENT)
class Correctness(FormatModel):
    max_absolute_error: FiniteFloat = 0.0
    max_relative_error: FiniteFloat = 0.0
    matched_ratio: float = 1.0
    has_nan: bool = False
    has_inf: bool = False
    trials: int = 0
    checked_timed_iterations: int = 0
    output: str | None = None  # the output that decided the verdict
    message: str | None = None
    flags: list[str] = field(default_factory=list)  # numerics flags (check/numerics_flags.py); strict mode fails them
    numerics: dict[str, dict[str, Any]] | None = None  # per float output: the numbers behind the flags


@dataclass(config=LENIENT)
class Performance(FormatModel):
    latency_ms: FiniteFloat
    reference_latency_ms: FiniteFloat = None
    speedup_factor: FiniteFloat = None
    latency: LatencyStats | None = None
    reference_latency: LatencyStats | None = None
    host_launch_ms: FiniteFloat = None  # median host time to queue one call (CUDA); see docs/timing.md
    gpu_busy_ms: FiniteFloat = None  # median CUPTI time one call's GPU work ran (union, all streams; probe calls)
    kernel_sum_ms: FiniteFloat = None  # median CUPTI sum of one call's kernel durations (probe calls)


@dataclass(config=LENIENT)
class Environment(FormatModel):
    device: str = "cpu"  # "cuda" or "cpu"
    hardware: str = ""  # GPU or CPU name
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    triton: str | None = None
    python: str | None = None
    hostname: str | None = None
    clocks_start: dict[str, Any] | None = None
    clocks_end: dict[str, Any] | None = None
    cpu_threads: int | None = Field(default=None, exclude_if=absent)  # CPU runs: torch's intra-op threads the calls were timed with (docs/timing.md)
    cpu_cores: list[int] | None = Field(default=None, exclude_if=absent)  # CPU runs: the cores both timed workers ran on (docs/timing.md)
    sandbox: dict[str, Any] | None = None  # mechanism -> applied (True or a note) or why not (worker/sandbox.py)

    @computed_field
    @property
    def libs(self) -> dict[str, str | None]:
        """The versions again where SOL-ExecBench keeps them."""
        return {"torch": self.torch, "triton": self.triton, "cuda": self.cuda}

    @model_validator(mode="before")
    @classmethod
    def _versions_from_libs(cls, data: Any) -> Any:
        """SOL-ExecBench's traces keep the versions only under `libs`."""
        if isinstance(data, dict) and isinstance(data.get("libs"), dict):
            data = dict(data)
            for key in ("torch", "triton", "cuda"):
                if data.get(key) is None and data["libs"].get(key) is not None:
                    data[key] = data["libs"][key]
        return data


@dataclass(config=LENIENT)
class Evaluation(FormatModel):
    status: Status
    timestamp: str = ""
    log: str = ""
    environment: Environment | None = None
    correctness: Correctness | None = None
    performance: Performance | None = None
    sol: SolRecord | None = None  # speed-of-light analysis and scores (solbench.sol.record)
    warnings: list[str] = field(default_factory=list)  # static-scan and telemetry findings
    seconds: float | None = None  # harness wall time spent on this workload
    # Where those seconds went, by phase (load, trials, judge, timing.*, probe, baselines, sol_analysis,
    # startup, channel, ...), and `gpu_timed`: what the timed calls themselves took (docs/formats.md).
    phases_s: dict[str, float] = field(default_factory=dict)

    @field_validator("status", mode="before")
    @classmethod
    def _known_status(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in Status.__members__:
            raise ValueError(f"unknown status {value!r}")
        return value


@dataclass(config=LENIENT)
class Trace(FormatModel):
    schema: str = field(default=TRACE_SCHEMA, kw_only=True)  # first on the line, as before
    definition: str
    workload: Workload  # the workload as in workload.jsonl (uuid, axes, inputs, tolerance)
    solution: str
    solution_hash: str
    evaluation: Evaluation

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data: Any) -> Any:
        """A line of an older version (or another tool's) in today's shape, or a one-line refusal."""
        return migrate(data) if isinstance(data, dict) else data

    @property
    def workload_uuid(self) -> str:
        return self.workload.uuid

    @property
    def status(self) -> Status:
        return self.evaluation.status

    @property
    def numerics_flags(self) -> list[str]:
        """The numerics flags of the workload (none in traces written before they existed)."""
        correctness = self.evaluation.correctness
        return list(correctness.flags) if correctness and correctness.flags else []

    def key(self) -> tuple[str, str, str]:
        """What a resumed run uses to know this evaluation is done."""
        return (self.definition, self.solution_hash, self.workload_uuid)
