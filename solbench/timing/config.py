"""How a timed block is run: warm-up, iteration counts, adaptive stopping, budgets.

Defaults aim at a trustworthy median on a GPU (1% relative CI half-width at 95%): calls of a millisecond
or more are timed for at least `min_block_ms` of device time per block, shorter calls at least
`short_call_iters` times, and the adaptive stop on the CI decides the rest (at the power limit, the floor
does: docs/timing.md). The CPU defaults are smaller so that tests on a 2-core CI machine stay fast.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class TimingConfig:
    warmup: int = 3
    """Minimum warm-up calls (allocator, caches, lazy module loading). Compilation and autotuning happened
    before, in the correctness trials and the CUDA graph capture's warm call."""
    iters: int = 10
    """Minimum timed iterations; always run, whatever the time budget (enough for a distribution-free CI)."""
    short_call_iters: int = 50
    """Adaptive: calls shorter than `long_call_ms` are timed at least this many times."""
    long_call_ms: float = 1.0
    """Adaptive: calls at least this long are timed for `min_block_ms` of device time instead of a count;
    CUDA: and without the settle (the idle gap matters to short calls only, docs/timing.md)."""
    min_block_ms: float = 100.0
    """Adaptive: device time a block of long calls measures at least (within `max_time_s`)."""
    short_block_ms: float = 0.0
    """Adaptive: time a block of short calls measures at least (within `max_time_s`), besides their count.
    CPU: the host's speed changes in episodes of a tenth of a second or more, and a block must span them
    (docs/timing.md, "CPU timings")."""
    max_iters: int = 1000
    """Adaptive stopping never goes past this many timed iterations."""
    adaptive: bool = True
    """After `iters`, keep timing in batches until the median's CI is tight enough."""
    target_rel_ci: float = 0.01
    """Stop when the CI half-width of the median, relative to the median, is at most this."""
    ci_level: float = 0.95
    power_cap_stop: bool = True
    """Adaptive: a block of long calls stops at its floor, CI target or not, when NVML says the board holds
    its clock at the power (or a thermal) limit; flagged `power_capped` (docs/timing.md)."""
    capped_iters: int = 0
    """Adaptive: a block that stops at the power limit has at least this many samples. Rounds that share the
    workload's `iters` (`orchestrator.timed.block_timing`) keep the whole count here: the CI is waived there, so
    the count is what the block's median rests on."""
    max_time_s: float = 5.0
    """Wall-time budget for the adaptive part of one timed block (the first `iters` always run)."""
    min_warmup_ms: float = 25.0
    """Warm up for at least this long as well as `warmup` calls (GPU boost, CPU frequency ramp)."""
    clock_warmup: bool = True
    """Also warm up until the SM clock (read through NVML) reaches its working level."""
    clock_warmup_timeout_s: float = 1.0
    memory_warmup_timeout_s: float = 0.0
    """CPU: also warm up until STEADY_CALLS calls in a row took no page fault (the memory a call runs in has
    stopped growing), for at most this long; 0: off (docs/timing.md, "CPU timings")."""
    clock_working_fraction: float = 0.9
    """SM clock at or above this fraction of its maximum counts as working level; a stable plateau
    below it (locked or power-limited clocks) counts too."""
    l2_flush: bool = True
    """Sweep a buffer of >= 2x the last-level cache before every call, outside the timed window."""
    l2_flush_mode: str = "read"
    """CUDA: "read" (sum the buffer: the L2 is left full of clean lines), "write" (fill it: dirty lines
    whose write-back the next call pays for) or "write_read". See docs/timing.md."""
    launch_hold: bool = True
    """CUDA: before each call's start event, hold the stream with a short GPU spin long enough for the
    host to queue the whole call, so the event time is the device's time for the call and not the
    host's launch latency (see docs/timing.md). The host time per call is reported beside it."""
    max_hold_ms: float = 2.0
    """The spin grows to cover the host's launch time, up to this; calls that take longer to launch
    are flagged ("launch_exposed")."""
    settle_ms: float = 1.0
    """CUDA: before preparing each call, wait for the device to drain and leave it idle this long,
    so that every call starts from the same quiescent state however long the host took to prepare
    its inputs (docs/timing.md: on an H100 an idle gap of >= 1 ms made 15-20 us calls 3-9% faster,
    and fresh inputs drawn at varying host speed moved whole blocks by up to 12%). 0: off."""
    cuda_graphs: bool = True
    """CUDA, read by the worker that builds the timed call: capture the call once per argument slot
    as a CUDA graph and time its replays (docs/timing.md, "CUDA graphs"). The timer itself does not
    look at it; on the CPU there is nothing to capture (`cpu()` turns it off)."""
    gc_off: bool = True
    """Disable Python's cyclic GC during warm-up and timed loops (a collection costs milliseconds)."""
    batch_min: int = 10
    """Smallest adaptive batch; batches grow to a quarter of the samples so far."""
    wall_margin_rel: float = 0.02
    wall_margin_ms: float = 0.05
    """Tolerance before "events_exceed_wall": event times summed may exceed the host wall time
    around the block by no more than this (relative + absolute)."""

    def __post_init__(self) -> None:
        if self.warmup < 0:
            raise ValueError("warmup must be >= 0")
        if self.iters < 1:
            raise ValueError("iters must be >= 1")
        if self.max_iters < self.iters:
            raise ValueError(f"max_iters ({self.max_iters}) must be >= iters ({self.iters})")
        if not 0.0 < self.ci_level < 1.0:
            raise ValueError("ci_level must be in (0, 1)")
        if self.target_rel_ci <= 0:
            raise ValueError("target_rel_ci must be > 0")
        if self.max_time_s <= 0 or self.min_warmup_ms < 0 or self.clock_warmup_timeout_s < 0 \
                or self.memory_warmup_timeout_s < 0:
            raise ValueError("time budgets must be non-negative (max_time_s > 0)")
        if not 0.0 < self.clock_working_fraction <= 1.0:
            raise ValueError("clock_working_fraction must be in (0, 1]")
        if self.max_hold_ms < 0:
            raise ValueError("max_hold_ms must be >= 0")
        if not 0 <= self.settle_ms <= 100:
            raise ValueError("settle_ms must be in [0, 100]")
        if self.batch_min < 1 or self.capped_iters < 0:
            raise ValueError("batch_min must be >= 1 and capped_iters >= 0")
        if self.short_call_iters < 1 or self.long_call_ms < 0 or self.min_block_ms < 0 or self.short_block_ms < 0:
            raise ValueError("short_call_iters must be >= 1; long_call_ms, min_block_ms and short_block_ms >= 0")

    @classmethod
    def cuda(cls, **overrides) -> TimingConfig:
        """GPU defaults (the dataclass defaults)."""
        return cls(**overrides)

    @classmethod
    def cpu(cls, **overrides) -> TimingConfig:
        """CPU defaults: fewer and cheaper iterations, no NVML clock warm-up, looser CI target.

        CPU timings are a smoke test of the pipeline (CI, laptops), not kernel measurements, so the
        budget per block is kept small enough for a whole shipped-problem run to take a minute or two. No
        cache flush: on a CPU it evicts the interpreter's and torch's own state with the data, and short
        calls then measure the harness (docs/timing.md, "CPU timings").
        """
        base = cls(warmup=2, iters=10, short_call_iters=10, min_block_ms=0.0, short_block_ms=60.0, max_iters=3000,
                   target_rel_ci=0.03, max_time_s=0.5, min_warmup_ms=5.0, clock_warmup=False, settle_ms=0.0,
                   cuda_graphs=False, l2_flush=False, memory_warmup_timeout_s=2.0)
        return replace(base, **overrides)

    @classmethod
    def for_device(cls, device: object, **overrides) -> TimingConfig:
        """`cuda()` for CUDA devices ("cuda", "cuda:1", torch.device, int), `cpu()` otherwise."""
        kind = getattr(device, "type", device)
        is_cuda = isinstance(kind, int) or (isinstance(kind, str) and kind.startswith("cuda"))
        return cls.cuda(**overrides) if is_cuda else cls.cpu(**overrides)

    def with_overrides(self, **overrides: Any) -> TimingConfig:
        """These settings with a run's overrides (None: keep the default). A minimum iteration count above
        `max_iters` raises the cap with it; CUDA graphs and the launch hold can only be turned off here,
        never on where the device defaults have them off (a CPU block has nothing to capture)."""
        given = {k: v for k, v in overrides.items() if v is not None}
        unknown = set(given) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"unknown timing settings: {sorted(unknown)}")
        if "iters" in given:
            given.setdefault("max_iters", max(self.max_iters, given["iters"]))
        for switch in ("cuda_graphs", "launch_hold", "adaptive"):
            if switch in given:
                given[switch] = bool(given[switch]) and getattr(self, switch)
        return replace(self, **given)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TimingConfig:
        """Settings from their dict form; unknown keys are an error (a typo must not be ignored)."""
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown timing settings: {sorted(unknown)}")
        return cls(**data)
