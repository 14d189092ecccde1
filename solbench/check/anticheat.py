"""Anti-cheat checks that do not trust the solution's process.

Everything a worker sends back was produced in a process that also ran the solution, so the
orchestrator treats a reply as data from an adversary:

* (The wire format itself, `solbench.protocol.framing`, is JSON plus raw tensor bytes: decoding a
  reply never runs code in the orchestrator, which writes the traces; `solbench.protocol.messages`
  refuses any reply whose form the harness never writes.)
* `screen_failure`: which failure statuses a solution's worker may report. A worker claiming
  `PASSED` as a failure, or blaming the reference (`INVALID_REFERENCE`, `MISSING_DATA`) after the
  reference worker handled the same inputs, is not believed.
* `check_time_reply`: the shape of a timing reply (types, sample counts consistent with the
  requested configuration, finite non-negative samples, sampled outputs from calls that existed),
  and the one timing bound the worker cannot influence: the samples cannot add up to more time than
  the orchestrator itself saw pass while it waited for the reply.
* `ProblemFiles`: a fingerprint of the problem folder, taken before the solution runs and compared
  afterwards, so a solution that writes `definition.json` or `workload.jsonl` (to loosen tolerances
  for later runs) is caught whatever happened inside its process.
"""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from solbench.timing.config import TimingConfig

if TYPE_CHECKING:  # a reply's type only: this module runs in the orchestrator, beside the protocol
    from solbench.protocol.messages import Timed

# -- what a solution's worker may claim -----------------------------------------------------------

# The escaped-work probe's calls after a timed block (worker.probe): a warm one, 5, and a confirming round of
# 5 more when the first round's tails accuse. Written out: this module must not import the worker's torch.
MAX_PROBE_CALLS = 1 + 2 * 5

# Statuses a solution's worker may report for a failed request. PASSED is never a failure, and the
# reference-side statuses are decided by the reference worker, which saw the same inputs first.
CANDIDATE_FAILURES = frozenset({"RUNTIME_ERROR", "TIMEOUT", "INCORRECT_SHAPE", "INCORRECT_DTYPE",
                                "INCORRECT_NUMERICAL", "REWARD_HACK"})
CANDIDATE_LOAD_FAILURES = CANDIDATE_FAILURES | {"COMPILE_ERROR", "SKIPPED"}


def screen_failure(op: str | None, status: Any, *, skip_plausible: bool = False) -> tuple[str, str]:
    """(status to record, note) for a failure a solution's worker reported for request `op`.

    A status the solution's process has no business deciding becomes REWARD_HACK when it would
    hide or excuse a result (PASSED, SKIPPED without cause, blaming the reference), with a note.
    `skip_plausible`: the orchestrator's own view that this machine cannot run the solution.
    """
    allowed = CANDIDATE_LOAD_FAILURES if op == "load" else CANDIDATE_FAILURES
    if status == "SKIPPED" and op == "load" and not skip_plausible:
        return "REWARD_HACK", "the solution's worker reported SKIPPED although this machine can run its language"
    if isinstance(status, str) and status in allowed:
        return status, ""
    if status in ("INVALID_REFERENCE", "MISSING_DATA"):
        return "RUNTIME_ERROR", (f"the solution's worker reported {status}, but the reference worker handled "
                                 f"the same workload; counted as a failure of the solution")
    return "REWARD_HACK", f"the solution's worker reported an impossible failure status {status!r}"


def _is_number(x: Any) -> bool:
    return type(x) in (int, float) and math.isfinite(x)


def check_time_reply(reply: Timed, config: TimingConfig, *, checked_outputs: int, elapsed_s: float,
                     required_outputs: int | None = None, margin_s: float = 0.05,
                     fixed_seeds: list[int] | None = None, reuse_allowed: bool = True,
                     fixed_allowed: bool = True) -> list[str]:
    """Problems with a timing reply from a solution's worker (empty when it is plausible).

    `config` is the timing configuration that was sent; `elapsed_s` the time the orchestrator waited.
    The reply's form (field types) was checked when it was decoded; this checks what it claims.
    `required_outputs` (default: all `checked_outputs`) is the fewest sampled outputs acceptable: a
    worker may keep fewer than asked only when the outputs are too large for its memory. Each sampled call
    names the call that drew its input set and that draw's nonce; the orchestrator derives the seed
    (`timed_call_seed`), and refuses two sampled calls on one set. `fixed_seeds`: the requested seeds
    (problems whose inputs do not depend on the seed rotate those by call index). `reuse_allowed`: whether
    the orchestrator let this block reuse input sets (a sampled call on an earlier call's set is refused if not);
    `fixed_allowed`: whether it may rotate the requested sets (inputs that do not depend on the seed).
    """
    problems: list[str] = []
    samples = reply.samples_ms
    if type(samples) is not list or not samples or not all(_is_number(s) and s >= 0 for s in samples):
        return ["samples_ms is not a non-empty list of finite, non-negative numbers"]
    iters, max_iters, adaptive = config.iters, config.max_iters, config.adaptive
    n = len(samples)
    if n < iters or n > max(iters, max_iters) or (not adaptive and n != iters):
        problems.append(f"{n} timed samples for a block configured with iters={iters}, max_iters={max_iters}, "
                        f"adaptive={adaptive}")
    warmup = reply.warmup
    if type(warmup) is not int or warmup < config.warmup:
        problems.append(f"warm-up count {warmup!r} below the configured {config.warmup}")
        warmup = 0
    wall_s = reply.wall_s
    if not _is_number(wall_s) or wall_s < 0:
        problems.append("wall_s is not a finite non-negative number")
    elif wall_s > elapsed_s + margin_s:
        problems.append(f"the worker claims a {wall_s:.3f} s timed block inside a request that took "
                        f"{elapsed_s:.3f} s")
    total_s = math.fsum(samples) / 1e3
    if total_s > elapsed_s + margin_s:
        problems.append(f"the timed samples add up to {total_s:.3f} s, more than the {elapsed_s:.3f} s the "
                        f"whole request took")
    flags = reply.flags
    if type(flags) is not list or not all(type(f) is str and len(f) < 100 for f in flags):
        problems.append("flags is not a list of short strings")
    probe_calls = reply.probe_calls
    if type(probe_calls) is not int or not 0 <= probe_calls <= MAX_PROBE_CALLS:
        problems.append(f"{probe_calls!r} probe calls claimed (at most {MAX_PROBE_CALLS})")
        probe_calls = 0
    problems += _sampled_problems(reply.sampled, checked_outputs, required_outputs, warmup + n + probe_calls,
                                  len(fixed_seeds or ()) if fixed_allowed else 0, reuse_allowed)
    return problems


def timed_call_seed(entry: list, block_key: int, fixed_seeds: list[int]) -> int:
    """The input seed of a sampled timed call, recomputed by the orchestrator from what it chose (the block
    key, the requested seeds) and the call's index, source and nonce: never a seed the worker reports.
    Nonce None: the requested sets rotated by call index (inputs that do not depend on the seed)."""
    # imported here: the driver lists devices and opens sessions without torch
    from solbench.inputs.seeds import call_seed

    index, source, nonce = entry[0], entry[1], entry[2]
    if nonce is None:
        return fixed_seeds[index % len(fixed_seeds)]
    return call_seed(block_key, source, nonce)


def input_sets_reused(sampled: list) -> bool:
    """Whether some sampled call ran on a set an earlier call drew (a block past its input budget)."""
    return any(e[2] is not None and e[1] != e[0] for e in sampled)


def _sampled_problems(sampled: Any, checked_outputs: int, required_outputs: int | None, calls: int,
                      fixed_sets: int, reuse_allowed: bool = True) -> list[str]:
    """What is wrong with the sampled outputs of a block of `calls` calls. Nothing the worker claims
    (flags, counts) loosens these: two checked outputs never come from one input set, a reused set was
    drawn by an earlier call of the block, and the block's last call is always checked (a solution
    cannot keep honest early outputs in place of its later ones)."""
    if type(sampled) is not list:
        return ["sampled outputs missing"]
    problems = []
    required = checked_outputs if required_outputs is None else min(required_outputs, checked_outputs)
    wanted = min(required, calls)
    if sampled and all(type(e) is list and len(e) == 4 and e[2] is None for e in sampled):
        wanted = min(wanted, fixed_sets)  # the requested sets rotated: one checked output per set at most
    if len(sampled) < wanted:
        problems.append(f"{len(sampled)} sampled outputs came back, {wanted} were asked for")
    if len(sampled) > max(checked_outputs + 1, 1):
        problems.append(f"{len(sampled)} sampled outputs, at most {checked_outputs + 1} were asked for")
    indices, sets = set(), []
    for entry in sampled:
        if type(entry) is not list or len(entry) != 4 or type(entry[3]) is not list:
            problems.append("malformed sampled output entry")
            continue
        index, source, nonce = entry[0], entry[1], entry[2]
        if type(index) is not int or not 0 <= index < calls or index in indices:
            problems.append(f"sampled output for call {index!r}, which was never made or came twice ({calls} calls)")
            continue
        indices.add(index)
        if nonce is None:
            if fixed_sets < 1:
                problems.append(f"sampled output for call {index} names a requested input set, but this block was "
                                f"not allowed to rotate them")
            sets.append(("fixed", index % max(fixed_sets, 1)))
        elif type(source) is not int or type(nonce) is not int or not 0 <= source <= index or not 0 <= nonce < 2**63:
            problems.append(f"sampled output for call {index} names no valid input set ({source!r}, {nonce!r})")
        else:
            sets.append(("drawn", source))
            if source != index and not reuse_allowed:
                problems.append(f"sampled call {index} ran on call {source}'s input set, but this block was not "
                                f"allowed to reuse sets")
    if len(set(sets)) < len(sets):
        problems.append("two sampled calls ran on the same input set (the seed choice was tampered with)")
    if len({kind for kind, _ in sets}) > 1:
        problems.append("sampled calls both on drawn and on requested input sets (a block is one or the other)")
    if checked_outputs > 0 and calls > 0 and calls - 1 not in indices:
        problems.append(f"the block's last call ({calls - 1}, counted from the reply's warm-up, samples and probe "
                        f"calls) is not among the sampled outputs")
    return problems


# -- the problem folder ----------------------------------------------------------------------------

class ProblemFiles:
    """Fingerprint of a problem folder: small files by content, large ones by size and mtime."""

    def __init__(self, folder: Path | str | None, *, max_files: int = 2000, hash_limit_bytes: int = 4 << 20):
        self.folder = Path(folder) if folder else None
        self.max_files = max_files
        self.hash_limit_bytes = hash_limit_bytes
        self.before = self.snapshot()

    def snapshot(self) -> dict[str, tuple]:
        if self.folder is None or not self.folder.is_dir():
            return {}
        out: dict[str, tuple] = {}
        for root, dirs, files in os.walk(self.folder):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                path = Path(root) / name
                try:
                    stat = path.stat()
                    if stat.st_size <= self.hash_limit_bytes:
                        out[str(path.relative_to(self.folder))] = ("sha256", hashlib.sha256(path.read_bytes()).hexdigest())
                    else:
                        out[str(path.relative_to(self.folder))] = ("stat", stat.st_size, stat.st_mtime_ns)
                except OSError:
                    continue
                if len(out) >= self.max_files:
                    return out
        return out

    def changes(self) -> list[str]:
        """Files added, removed or changed since the fingerprint was taken."""
        after = self.snapshot()
        changed = sorted(k for k in set(self.before) | set(after) if self.before.get(k) != after.get(k))
        return changed
