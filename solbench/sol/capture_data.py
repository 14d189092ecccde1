"""What a capture records: the work a reference did on meta tensors, convention-free.

`capture` produces a `Capture`; `analyser` turns it into FLOPs and bytes under a convention.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class CaptureError(RuntimeError):
    """The reference could not be traced (the analyser falls back and says why)."""


class BudgetExceeded(CaptureError):
    """The reference exceeded the deterministic trace budget (ops, real elements): same on every run."""


class WallClockLimit(CaptureError):
    """Last-resort wall-clock safety net hit: the outcome depends on machine speed, so it is reported."""


@dataclass
class MatmulEvent:
    op: str
    flops: float
    dtype: str  # definition dtype name of the operands (narrowest origin)
    active: float = 1.0  # fraction of the work left once masks are applied
    provable: bool = True  # both operands come from inputs and no input-dependent mask touched it


@dataclass
class InputUse:
    name: str
    dtype: str
    numel: int  # stored elements (packed fp4: bytes)
    regions: dict = field(default_factory=dict)  # (offset, shape, stride) -> distinct elements
    gathered: int = 0
    written_regions: dict = field(default_factory=dict)  # written in place: (offset, shape, stride) -> elements
    scattered: int = 0  # written in place by indexed / masked ops
    read_cap: int | None = None  # at most this many are needed (a paged pool: the pages named, `paged`)

    @property
    def elements_read(self) -> int:
        read = min(self.numel, sum(self.regions.values()) + self.gathered)
        return read if self.read_cap is None else min(read, self.read_cap)

    @property
    def elements_written(self) -> int:
        return min(self.numel, sum(self.written_regions.values()) + self.scattered)


@dataclass
class OutputInfo:
    name: str
    dtype: str
    numel: int
    aliases_input: str | None = None  # the reference returned (a view of) this input
    written: int | None = None  # for an input handed back: the elements the reference wrote into it
    distinct: int | None = None  # a broadcast (stride-0) view: the distinct elements behind it

    @property
    def elements_moved(self) -> int:
        """Elements a kernel must write: all of a fresh output (only the distinct ones of a broadcast
        view, which the harness accepts from solutions too), the updated part of an input handed back."""
        if self.aliases_input is not None:
            return min(self.numel, self.written or 0)
        return self.numel if self.distinct is None else min(self.numel, self.distinct)


@dataclass
class Capture:
    method: str  # "meta" (exact), "meta-approx" (invented values), "declared-io" (not traced)
    matmuls: list[MatmulEvent]
    flops_other: float
    inputs: dict[str, InputUse]
    outputs: dict[str, OutputInfo]
    unknown_ops: dict[str, int]
    fabricated: list[str]
    notes: list[str]
    n_ops: int
    low_precision: list[str] = field(default_factory=list)  # fp8 / fp4 dtypes made inside the reference

    @property
    def exact(self) -> bool:
        return self.method == "meta"
