"""Traces: one JSON object per (solution, workload) evaluation.

Layout follows SOL-ExecBench's trace (`definition`, `workload`, `solution`, `evaluation{status,
environment, timestamp, log, correctness, performance}`) so existing readers keep working; solbench
adds latency statistics, the speed-of-light analysis and anti-cheat warnings. `schema` versions the
format; docs/formats.md lists every change.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

from solbench.spec.errors import SpecError

TRACE_SCHEMA = "solbench.trace/1"


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


def _finite_or_none(value: float | None) -> float | None:
    """Strict JSON has no NaN/Inf: store them as null."""
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def _from_fields(cls, data: dict | None):
    if data is None:
        return None
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


@dataclass
class LatencyStats:
    """Per-iteration latencies of one timed block, summarised; every figure in milliseconds."""

    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    stdev_ms: float
    n: int
    ci_low_ms: float | None = None  # confidence interval of the median
    ci_high_ms: float | None = None
    ci_level: float | None = None
    iqr_ms: float | None = None
    warmup: int = 0
    method: str = ""  # "cuda_events", "cupti", "cpu_clock"
    flags: list[str] = field(default_factory=list)  # e.g. "wide_ci", "throttled"

    @property
    def rel_ci_halfwidth(self) -> float | None:
        if self.ci_low_ms is None or self.ci_high_ms is None or self.median_ms <= 0:
            return None
        return (self.ci_high_ms - self.ci_low_ms) / 2 / self.median_ms

    def to_dict(self) -> dict:
        return {k: _finite_or_none(v) if isinstance(v, float) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict | None) -> LatencyStats | None:
        return _from_fields(cls, data)


@dataclass
class Correctness:
    max_absolute_error: float | None = 0.0
    max_relative_error: float | None = 0.0
    matched_ratio: float = 1.0
    has_nan: bool = False
    has_inf: bool = False
    trials: int = 0
    checked_timed_iterations: int = 0
    output: str | None = None  # the output that decided the verdict
    message: str | None = None
    flags: list[str] = field(default_factory=list)  # numerics flags (check/numerics_flags.py); strict mode fails them
    numerics: dict[str, dict] | None = None  # per float output: the numbers behind the flags

    def to_dict(self) -> dict:
        d = asdict(self)
        d["max_absolute_error"] = _finite_or_none(self.max_absolute_error)
        d["max_relative_error"] = _finite_or_none(self.max_relative_error)
        return d

    @classmethod
    def from_dict(cls, data: dict | None) -> Correctness | None:
        correctness = _from_fields(cls, data)  # traces written before the flags existed have neither key
        if correctness is not None:
            correctness.flags = list(correctness.flags or [])
            if not isinstance(correctness.numerics, dict):
                correctness.numerics = None
        return correctness


@dataclass
class Performance:
    latency_ms: float
    reference_latency_ms: float | None
    speedup_factor: float | None
    latency: LatencyStats | None = None
    reference_latency: LatencyStats | None = None
    host_launch_ms: float | None = None  # median host time to queue one call (CUDA); see docs/timing.md
    gpu_busy_ms: float | None = None  # median CUPTI time one call's GPU work ran (union, all streams; probe calls)
    kernel_sum_ms: float | None = None  # median CUPTI sum of one call's kernel durations (probe calls)

    def to_dict(self) -> dict:
        return {"latency_ms": _finite_or_none(self.latency_ms),
                "reference_latency_ms": _finite_or_none(self.reference_latency_ms),
                "speedup_factor": _finite_or_none(self.speedup_factor),
                "latency": self.latency.to_dict() if self.latency else None,
                "reference_latency": self.reference_latency.to_dict() if self.reference_latency else None,
                "host_launch_ms": _finite_or_none(self.host_launch_ms),
                "gpu_busy_ms": _finite_or_none(self.gpu_busy_ms),
                "kernel_sum_ms": _finite_or_none(self.kernel_sum_ms)}

    @classmethod
    def from_dict(cls, data: dict | None) -> Performance | None:
        if data is None:
            return None
        return cls(data["latency_ms"], data.get("reference_latency_ms"), data.get("speedup_factor"),
                   LatencyStats.from_dict(data.get("latency")), LatencyStats.from_dict(data.get("reference_latency")),
                   data.get("host_launch_ms"), data.get("gpu_busy_ms"), data.get("kernel_sum_ms"))


@dataclass
class Environment:
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
    sandbox: dict[str, Any] | None = None  # mechanism -> applied (True or a note) or why not (worker/sandbox.py)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["libs"] = {"torch": self.torch, "triton": self.triton, "cuda": self.cuda}  # SOL-ExecBench shape
        return d

    @classmethod
    def from_dict(cls, data: dict | None) -> Environment | None:
        if data is None:
            return None
        data = dict(data)
        libs = data.get("libs") or {}
        for key in ("torch", "triton", "cuda"):  # SOL-ExecBench keeps versions under "libs"
            if data.get(key) is None and libs.get(key) is not None:
                data[key] = libs[key]
        return _from_fields(cls, data)


@dataclass
class Evaluation:
    status: Status
    timestamp: str
    log: str = ""
    environment: Environment | None = None
    correctness: Correctness | None = None
    performance: Performance | None = None
    sol: dict[str, Any] | None = None  # speed-of-light analysis and scores (solbench.sol)
    warnings: list[str] = field(default_factory=list)  # static-scan and telemetry findings
    seconds: float | None = None  # harness wall time spent on this workload
    # Where those seconds went, by phase (load, trials, judge, timing.*, probe, baselines, sol_analysis,
    # channel, ...), and `gpu_timed`: what the timed calls themselves took (docs/formats.md).
    phases_s: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"status": self.status.value, "timestamp": self.timestamp, "log": self.log,
                "environment": self.environment.to_dict() if self.environment else None,
                "correctness": self.correctness.to_dict() if self.correctness else None,
                "performance": self.performance.to_dict() if self.performance else None,
                "sol": self.sol, "warnings": list(self.warnings), "seconds": self.seconds,
                "phases_s": dict(self.phases_s)}

    @classmethod
    def from_dict(cls, data: dict) -> Evaluation:
        try:
            status = Status(data["status"])
        except (KeyError, ValueError):
            raise SpecError(f"trace has unknown status {data.get('status')!r}") from None
        return cls(status, data.get("timestamp", ""), data.get("log", ""),
                   Environment.from_dict(data.get("environment")), Correctness.from_dict(data.get("correctness")),
                   Performance.from_dict(data.get("performance")), data.get("sol"), list(data.get("warnings") or []),
                   data.get("seconds"), _phases(data.get("phases_s")))


def _phases(data: Any) -> dict[str, float]:
    """Phase seconds from a trace line; anything but a mapping of names to numbers is dropped."""
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


@dataclass
class Trace:
    definition: str
    workload: dict[str, Any]  # the workload as in workload.jsonl (uuid, axes, inputs, tolerance)
    solution: str
    solution_hash: str
    evaluation: Evaluation
    schema: str = TRACE_SCHEMA

    @property
    def workload_uuid(self) -> str:
        return self.workload["uuid"]

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

    def to_dict(self) -> dict:
        return {"schema": self.schema, "definition": self.definition, "workload": self.workload,
                "solution": self.solution, "solution_hash": self.solution_hash,
                "evaluation": self.evaluation.to_dict()}

    @classmethod
    def from_dict(cls, data: dict) -> Trace:
        if not isinstance(data, dict):
            raise SpecError("trace must be a JSON object")
        try:
            workload = data["workload"]
            if not isinstance(workload, dict) or "uuid" not in workload:
                raise SpecError("trace workload has no uuid")
            if not isinstance(data.get("evaluation"), dict):
                raise SpecError("trace has no evaluation (a trace of a run that never finished?)")
            return cls(data["definition"], workload, data.get("solution") or "", data.get("solution_hash") or "",
                       Evaluation.from_dict(data["evaluation"]), data.get("schema", TRACE_SCHEMA))
        except KeyError as exc:
            raise SpecError(f"trace has no {exc.args[0]!r}") from None
