"""Numerics flags: patterns the official tolerance lets through that honest kernels do not produce.

The official rule (`correctness.py`) passes an output when `required_matched_ratio` of its elements
lie within `atol + rtol*|ref|`. It says nothing about how far the other elements miss, where they
are, or where inside the tolerance the matched ones sit. Three patterns are flagged; in the default
(official) mode they are only reported, in strict mode a flagged output is INCORRECT_NUMERICAL.

Rows are the last dimension (the outputs' innermost vectors); columns are positions along it.

* `outliers`: elements whose error exceeds `OUTLIER_FACTOR` times the local magnitude of the
  reference, `max(atol + rtol*|ref|, |ref|, RMS of the reference's row)`. An honest kernel's errors
  are rounding errors, small next to the data; even a discrete decision taken differently (a
  routing near-tie) gives values of the data's magnitude. An error ten times the data is garbage.
* `concentrated_mismatches`: mismatched elements (outside the official tolerance) gathered in whole
  rows or columns: a run of `RUN_ROWS` or more consecutive rows each at least `CONCENTRATED_SHARE`
  mismatched, such a row that is exactly zero (never written), or a column mismatched in at least
  `CONCENTRATED_SHARE` of the rows. Honest mismatches are scattered (rounding near the tolerance's
  edge; an occasional whole row of plausible values from a near-tie, independent of its
  neighbours); a kernel that skips the last tiles, rows or columns makes them contiguous.
* `systematic_bias`: the errors of the *matched* elements lean one way, by a real share of the
  tolerance *and* by more than rounding choices explain. The lean is measured twice: as the mean of
  `err / (atol + rtol*|ref|)` (in allowed errors), and as `sum(err) / (u * sum(|ref|))` (the mean
  error next to the mean magnitude, in unit roundoffs), where `u` is the unit roundoff (eps/2) of
  the precision the output may honestly be computed in: the output dtype's, or TF32's for float32
  outputs (Triton's `tl.dot` and cuBLAS use TF32 tensor cores for float32, and the hardware may
  truncate the operands). Two orientations: `offset` (the sign of the error) and `scale` (the sign of
  `err * sign(ref)`: |out| too large or too small). Flagged when, in one orientation, the mean over
  all matched elements exceeds `BIAS_LIMIT` allowed errors (and `BIAS_SIGMAS` standard errors) and
  `BIAS_UNITS` unit roundoffs; or when at least `ROW_BIAS_SHARE` of the rows (each at least half
  matched, `MIN_LINE` elements) have row means beyond `ROW_BIAS_LIMIT` allowed errors and
  `BIAS_UNITS` unit roundoffs. Honest rounding has mean 0 (round-to-nearest is unbiased); another
  reduction order or a more precise accumulation moves each row's statistic by a few ulps with signs
  that differ between rows; a one-sided rounding mode leans by well under `BIAS_UNITS` (truncating
  the output: about 0.7 unit roundoffs; truncating both operands of a TF32 product: about 1.4). A 3%
  approximation on a bf16 output with a 5% tolerance leans by 0.68 allowed errors and 8.7 units.

Rows shorter than `MIN_LINE`, and columns of outputs with fewer than `MIN_LINE` rows, get no row or
column statistics. Rows longer than the comparison chunk are taken in pieces of at most one chunk.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field

import torch

OUTLIER_FACTOR = 10.0
MIN_LINE = 16
CONCENTRATED_SHARE = 0.5
RUN_ROWS = 4
BIAS_LIMIT = 0.2
BIAS_UNITS = 3.0
BIAS_SIGMAS = 4.0
ROW_BIAS_LIMIT = 0.5
ROW_BIAS_SHARE = 0.02
FLAGS = ("outliers", "concentrated_mismatches", "systematic_bias")
_TINY = 1e-300
_UNIT_ROUNDOFF = {torch.float64: 2.0 ** -53, torch.float32: 2.0 ** -24, torch.float16: 2.0 ** -11,
                  torch.bfloat16: 2.0 ** -8, torch.float8_e4m3fn: 2.0 ** -4, torch.float8_e5m2: 2.0 ** -3}
FP4_UNIT_ROUNDOFF = 2.0 ** -2  # e2m1: one mantissa bit
TF32_UNIT_ROUNDOFF = 2.0 ** -11  # ten mantissa bits


def unit_roundoff(dtype: torch.dtype, packed_fp4: bool = False) -> float:
    """The unit roundoff of the precision an output of `dtype` may honestly be computed in: half the
    gap between 1 and the next value of the dtype, or of TF32 for float32 outputs."""
    if packed_fp4:
        return FP4_UNIT_ROUNDOFF
    if dtype == torch.float32:
        return TF32_UNIT_ROUNDOFF
    return _UNIT_ROUNDOFF.get(dtype, TF32_UNIT_ROUNDOFF)


def line_length(shape: Sequence[int], packed_fp4: bool = False) -> int:
    """Values per row (the last dimension; fp4 stores two values per byte); 1 for a 0-d output."""
    if not shape:
        return 1
    return int(shape[-1]) * (2 if packed_fp4 else 1)


def chunk_ranges(n: int, step: int, line: int) -> Iterator[tuple[int, int]]:
    """[start, end) ranges of at most `step` elements that never cut a row: whole rows per range when
    a row fits in `step`, else pieces of one row."""
    if n <= 0:
        return
    line = max(1, min(line, n))
    if line <= step:
        rows_per = step // line * line
        for start in range(0, n, rows_per):
            yield start, min(n, start + rows_per)
        return
    for row_start in range(0, n, line):
        row_end = min(n, row_start + line)
        for start in range(row_start, row_end, step):
            yield start, min(row_end, start + step)


@dataclass
class NumericsFindings:
    """The numbers behind the flags for one output (kept in the trace for every float output)."""

    flags: list[str] = field(default_factory=list)
    outliers: int = 0
    worst_error_to_magnitude: float = 0.0  # mismatched elements: largest |err| / max(atol + rtol|ref|, |ref|, row RMS)
    mismatched_rows: int = 0  # rows at least half mismatched
    longest_mismatched_run: int = 0  # most consecutive such rows
    zero_rows: int = 0  # such rows that are exactly zero (never written, or a do-nothing kernel)
    mismatched_columns: int = 0  # columns mismatched in at least half of the rows
    bias: float = 0.0  # mean signed error of matched elements, in allowed errors (the orientation leaning most)
    bias_units: float = 0.0  # the same mean in unit roundoffs of the output's compute precision
    bias_kind: str = "offset"  # "offset" (sign of err) or "scale" (sign of err * sign(ref))
    biased_row_share: float = 0.0  # share of eligible rows whose own means exceed both row limits

    def to_dict(self) -> dict:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict) -> NumericsFindings:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in names})

    def describe(self) -> str:
        parts = []
        if "outliers" in self.flags:
            parts.append(f"{self.outliers} element(s) off by more than {OUTLIER_FACTOR:g}x the data's magnitude "
                         f"(worst {self.worst_error_to_magnitude:.3g}x)")
        if "concentrated_mismatches" in self.flags:
            where = []
            if self.longest_mismatched_run >= RUN_ROWS or self.zero_rows:
                where.append(f"{self.mismatched_rows} rows at least half mismatched, {self.longest_mismatched_run} "
                             f"of them consecutive, {self.zero_rows} all zeros")
            if self.mismatched_columns:
                where.append(f"{self.mismatched_columns} column(s) mismatched in at least half of the rows")
            parts.append("mismatches concentrated: " + "; ".join(where))
        if "systematic_bias" in self.flags:
            parts.append(f"errors inside the tolerance lean one way ({self.bias_kind}): mean {self.bias:+.3f} of the "
                         f"allowed error ({self.bias_units:+.1f} unit roundoffs) over matched elements, "
                         f"{100 * self.biased_row_share:.1f}% of rows leaning on their own")
        return "; ".join(parts)


class ErrorProfile:
    """Accumulates the flags' statistics over the ranges of one output, in order (`chunk_ranges`)."""

    def __init__(self, line: int, atol: float, rtol: float, unit: float):
        self.line, self.atol, self.rtol, self.unit = line, atol, rtol, unit
        self.outliers, self.worst = 0, 0.0
        self.matched = 0
        self.sums = [0.0, 0.0, 0.0, 0.0]  # allowed errors (offset, scale); errors (offset, scale)
        self.magnitude = 0.0  # sum of |ref| over matched elements
        self.squares = 0.0  # of the allowed-error values
        self.rows_eligible, self.rows_biased = 0, 0
        self.rows_mismatched, self.run, self.longest_run, self.zero_rows = 0, 0, 0, 0
        self.column_rows = 0
        self.column_misses: torch.Tensor | None = None
        self._buffers: dict[str, torch.Tensor] = {}

    def add(self, o: torch.Tensor, r: torch.Tensor) -> None:
        """One range of float64 values, any of them non-finite (those positions count nowhere)."""
        valid = torch.isfinite(o) & torch.isfinite(r)
        invalid = None
        if not bool(valid.all()):
            invalid = ~valid
            o, r = torch.where(valid, o, 0.0), torch.where(valid, r, 0.0)
        r_abs = r.abs()
        fails = (o - r).abs() > r_abs * self.rtol + self.atol
        self.add_finite(o, r, r_abs, fails, int(fails.sum()), invalid)

    def _buffer(self, key: str, like: torch.Tensor) -> torch.Tensor:
        n = like.numel()
        held = self._buffers.get(key)
        if held is None or held.numel() < n or held.device != like.device:
            held = self._buffers[key] = torch.empty(n, dtype=torch.float64, device=like.device)
        return held[:n]

    def add_finite(self, o: torch.Tensor, r: torch.Tensor, r_abs: torch.Tensor, fails: torch.Tensor,
                   fail_count: int, invalid: torch.Tensor | None = None,
                   spare: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
        """One range of finite float64 values with `|ref|` and the official mismatch mask already
        computed (the comparison's short path has both); `invalid` marks positions to ignore;
        `spare`: two float64 buffers of the range's length the caller no longer needs."""
        n = o.numel()
        if n == 0:
            return
        width = self.line if self.line <= n else n
        rows = n // width
        if width == self.line:
            self.column_rows += rows
        z = self._buffer("z", o)
        sign, work = spare if spare is not None else (self._buffer("sign", o), self._buffer("work", o))
        excluded = fails if invalid is None else fails | invalid
        masked = bool(fail_count) or invalid is not None
        torch.sub(o, r, out=z)
        if masked:
            z.masked_fill_(excluded, 0.0)  # matched elements only, from here on
        torch.sign(r, out=sign)
        error_offset = z.view(rows, width).sum(1)
        error_scale = torch.mul(z, sign, out=work).view(rows, width).sum(1)
        magnitude = torch.where(excluded, 0.0, r_abs) if masked else r_abs
        magnitude_row = magnitude.view(rows, width).sum(1)
        torch.mul(r_abs, self.rtol, out=work).add_(self.atol)
        if self.atol <= 0:
            work.clamp_(min=_TINY)
        z.div_(work)  # in allowed errors
        allowed_offset = z.view(rows, width).sum(1)
        squares = torch.dot(z, z)
        allowed_scale = z.mul_(sign).view(rows, width).sum(1)
        row_sums = [allowed_offset, allowed_scale, error_offset, error_scale]
        count_row = width - excluded.view(rows, width).sum(1) if masked else torch.full((rows,), width, device=o.device)
        stats = [count_row.sum(), *(row.sum() for row in row_sums), squares, magnitude_row.sum()]
        row_stats = width >= MIN_LINE
        if row_stats:
            eligible = (count_row >= MIN_LINE) & (count_row * 2 >= width)  # at least half matched
            per, scale = count_row.clamp(min=1), (magnitude_row * self.unit).clamp(min=_TINY)
            leaning = [(row_sums[k].abs() / per > ROW_BIAS_LIMIT) & (row_sums[k + 2].abs() / scale > BIAS_UNITS)
                       for k in (0, 1)]
            stats += [eligible.sum(), (eligible & (leaning[0] | leaning[1])).sum()]
        if fail_count:
            stats += self._misses(o, r, r_abs, fails, invalid, rows, width, row_stats)
        values = torch.stack([v.to(torch.float64) for v in stats]).tolist()
        self.matched += int(values[0])
        for k in range(4):
            self.sums[k] += values[1 + k]
        self.squares += values[5]
        self.magnitude += values[6]
        rest = values[7:]
        if row_stats:
            self.rows_eligible += int(rest[0])
            self.rows_biased += int(rest[1])
            rest = rest[2:]
        if not fail_count:
            self.run = 0
            return
        self.outliers += int(rest[0])
        self.worst = max(self.worst, rest[1])
        if row_stats:
            longest, trailing, all_bad, leading, bad_rows, zero_rows = (int(v) for v in rest[2:8])
            self.rows_mismatched += bad_rows
            self.zero_rows += zero_rows
            self.longest_run = max(self.longest_run, longest, self.run + leading)  # a run may go on from the last range
            self.run = self.run + rows if all_bad else trailing

    def _misses(self, o, r, r_abs, fails, invalid, rows: int, width: int, row_stats: bool) -> list[torch.Tensor]:
        """Outliers among the mismatched elements (only they can be), mismatched rows and columns."""
        index = fails.nonzero().squeeze(1)
        row_of = torch.div(index, width, rounding_mode="floor")
        valid_row = width if invalid is None else width - invalid.view(rows, width).sum(1)
        rms = torch.linalg.vector_norm(r.view(rows, width), dim=1) / torch.sqrt(torch.as_tensor(valid_row).clamp(min=1))
        r_miss = r_abs[index]
        magnitude = torch.maximum(torch.maximum(r_miss * self.rtol + self.atol, r_miss), rms[row_of]).clamp_(min=_TINY)
        ratio = (o[index] - r[index]).abs() / magnitude
        stats = [(ratio > OUTLIER_FACTOR).sum(), ratio.max()]
        if row_stats:
            miss_row = fails.view(rows, width).sum(1)
            bad = miss_row >= CONCENTRATED_SHARE * width
            zero = ~(o.view(rows, width) != 0).any(1)
            stats += [*self._runs(bad), bad.sum(), (bad & zero).sum()]
        if width == self.line:
            column = fails.view(rows, width).sum(0)
            self.column_misses = column if self.column_misses is None else self.column_misses + column
        return stats

    @staticmethod
    def _runs(bad: torch.Tensor) -> list[torch.Tensor]:
        """[longest run, trailing run, all bad, leading run] of True in a row vector (as tensors)."""
        index = torch.arange(bad.numel(), device=bad.device)
        last_good = torch.cummax(torch.where(bad, -1, index), 0).values
        run = torch.where(bad, index - last_good, 0)
        good = (~bad).nonzero()
        leading = good[0, 0] if good.numel() else torch.tensor(bad.numel(), device=bad.device)
        return [run.max(), run[-1], bad.all(), leading]

    def finish(self) -> NumericsFindings:
        worst = self.worst if math.isfinite(self.worst) else sys.float_info.max  # traces hold no inf
        found = NumericsFindings(outliers=self.outliers, worst_error_to_magnitude=worst,
                                 mismatched_rows=self.rows_mismatched, longest_mismatched_run=self.longest_run,
                                 zero_rows=self.zero_rows)
        if self.column_misses is not None and self.column_rows >= MIN_LINE:
            found.mismatched_columns = int((self.column_misses >= CONCENTRATED_SHARE * self.column_rows).sum())
        leaning = False
        if self.matched:
            means = [total / self.matched for total in self.sums[:2]]
            means += [total / max(self.unit * self.magnitude, _TINY) for total in self.sums[2:]]
            kinds = []
            for kind in (0, 1):
                spread = math.sqrt(max(self.squares / self.matched - means[kind] ** 2, 0.0) / self.matched)
                if (abs(means[kind]) > BIAS_LIMIT and abs(means[kind]) > BIAS_SIGMAS * spread
                        and abs(means[kind + 2]) > BIAS_UNITS):
                    kinds.append(kind)
            leaning = bool(kinds)
            kind = kinds[0] if kinds else (0 if abs(means[0]) >= abs(means[1]) else 1)
            found.bias, found.bias_units, found.bias_kind = means[kind], means[kind + 2], ("offset", "scale")[kind]
        if self.rows_eligible:
            found.biased_row_share = self.rows_biased / self.rows_eligible
        if self.outliers:
            found.flags.append("outliers")
        if self.longest_run >= RUN_ROWS or self.zero_rows or found.mismatched_columns:
            found.flags.append("concentrated_mismatches")
        if (leaning and self.matched >= MIN_LINE) or (self.rows_biased and found.biased_row_share >= ROW_BIAS_SHARE):
            found.flags.append("systematic_bias")
        return found


def merge_findings(items: Sequence[dict | None]) -> dict | None:
    """The worst of several findings of one output (trials): flags united, counts and ratios at their
    largest, the bias with the largest magnitude."""
    found = [NumericsFindings.from_dict(d) for d in items if d]
    if not found:
        return None
    merged = NumericsFindings()
    for f in found:
        merged.flags = sorted(set(merged.flags) | set(f.flags), key=FLAGS.index)
        for key in ("outliers", "worst_error_to_magnitude", "mismatched_rows", "longest_mismatched_run", "zero_rows",
                    "mismatched_columns", "biased_row_share"):
            setattr(merged, key, max(getattr(merged, key), getattr(f, key)))
        if abs(f.bias) > abs(merged.bias):
            merged.bias, merged.bias_units, merged.bias_kind = f.bias, f.bias_units, f.bias_kind
    return merged.to_dict()
