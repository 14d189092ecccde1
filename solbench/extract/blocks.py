"""Generic extraction of a built model: record -> partition -> export -> code -> draft -> validate.

Works on any `BuiltModel`, whatever library defined it. Every module either yields a validated draft
or is reported in `not_emitted` with its reason (left out by design, covered by a family template,
failed to export, or did not match its module): nothing is dropped silently.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from solbench.extract import (
    backward_check,
    block_export,
    block_pool,
    block_reuse,
    capture,
    codegen,
    eager_path,
    far_calls,
    far_match,
    generic,
    generic_check,
    partition,
    precision,
    workload_check,
)
from solbench.extract.backward import kind_of as backward_kind
from solbench.extract.built import BuiltModel
from solbench.extract.draft import Draft
from solbench.extract.partition import NotEmitted
from solbench.extract.rope_inside import blocks as rope_inside_blocks
from solbench.extract.validate import Validation

# A block is copied to CPU in fp32 and bf16 to be validated: past this many parameters (4 GB in fp32; a
# FLUX double-stream block has about 0.34 G, Qwen3-Next's 512-expert MoE layer 1.6 G) it is reported,
# not captured; its smaller parts are still emitted.
MAX_BLOCK_PARAMS = 10**9
TOO_LARGE = "too large to validate on CPU ({:.2f} G parameters); its parts are emitted"
DTYPE_SUFFIX = {torch.bfloat16: "", torch.float16: "_fp16", torch.float32: "_fp32"}
# Backward kinds whose family-template backward starts inside the module (after the projections, the q/k
# norms and the rotary embedding, or without the layer's residual path) or that have none (the rotary
# table's, through its inverse frequencies; a router's, through its sigmoid or softmax and top-k): with
# `backward`, a block of these kinds that a template covers is still captured, and only its backward is written.
BACKWARD_PAST_TEMPLATES = ("attention", "layer", "rotary", "router")
FOR_BACKWARD = "{} (captured only for its backward)"
GROWS = "its graph grows with the size it is traced at (a Python loop over a size, unrolled): only the validated " \
        "sizes are kept"


@dataclass
class BlocksResult:
    drafts: list[Draft] = field(default_factory=list)
    validations: list[Validation] = field(default_factory=list)
    not_emitted: list[NotEmitted] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what was emitted with less than it would have (workloads)
    blocks: int = 0
    ahead: int = 0  # blocks whose forward a forked worker found ahead of their turn (`block_pool`)
    seconds: float = 0.0


def extract_blocks(built: BuiltModel, dtype: torch.dtype = torch.bfloat16, *, validate: bool = True,
                   covered: Callable[[str], str] | None = None,
                   progress: Callable[[str], None] | None = None, backward: bool = False,
                   rope_inside: bool = False) -> BlocksResult:
    """Drafts for every distinct block of `built` that `covered(path)` (a reason or "") does not claim;
    with `backward`, also the backward of each block of a kind that has one (`backward_check.derive`); with
    `rope_inside`, also each attention and layer block fused with the rotary module that feeds it (never a
    template's: they take the table)."""
    start = time.perf_counter()
    tell = progress or (lambda step: None)
    result = BlocksResult()
    model = precision.cast(built.module, dtype, built.library)  # as the library loads it in `dtype`
    points = capture.axis_points(built)
    tell(f"recording module calls at {len(points)} sizes")
    calls = block_pool.each(lambda index: capture.record_calls(built, points[index], dtype), len(points))
    large = far_calls.LargeCalls(built, dtype, points)
    kinds, result.not_emitted = partition.blocks(model, calls)
    extra = rope_inside_blocks(model, kinds, calls) if rope_inside else []
    fused = {id(b) for b in extra}  # never a template's problem: the templates take the table
    kinds += extra
    # largest first: a block that unrolls a loop over a size (and its parents) is found before the small
    # blocks that would otherwise trace the whole model past its largest sizes, loop and all (`far_calls.LargeCalls`)
    kinds.sort(key=lambda b: -_parameter_count(b))
    result.blocks = len(kinds)
    grad_flags: dict = {}  # filled once, by the first block with a backward
    plans = [_plan(block, covered, backward, id(block) in fused) for block in kinds]
    captured = [_parameter_count(b) for b, (reason, _, too_large) in zip(kinds, plans) if not reason and not too_large]
    workers = 1 if backward or not captured else block_pool.wanted(max(captured))
    ahead = _sent_ahead(built, kinds, plans, points, dtype, large, validate) if workers > 1 else []

    def work(index: int) -> _Taken:  # in a forked worker (`block_pool`)
        return _work_ahead(built, kinds[index], points, dtype, large, validate)

    with block_pool.ahead(work, ahead, workers) as pool:
        for number, (block, (reason, only_backward, too_large)) in enumerate(zip(kinds, plans), 1):
            if reason:
                result.not_emitted.append(NotEmitted(block.path, block.class_name,
                                                     FOR_BACKWARD.format(reason) if only_backward else reason,
                                                     by_design=True))
                if not only_backward:
                    continue
            if too_large:
                result.not_emitted.append(NotEmitted(block.path, _label(block, only_backward), too_large,
                                                     by_design=True))
                continue
            tell(f"capturing {block.class_name} ({number}/{len(kinds)})")
            taken = (lambda index=number - 1: pool.take(index)) if number - 1 in ahead else None
            forward = _forward_once(built, block, points, dtype, large, validate, result, only_backward, tell,
                                    shareable=id(block) not in fused, taken=taken)
            if forward is None:
                continue
            draft, gen = forward
            if not only_backward:
                result.drafts.append(draft)
            if backward:
                _backward(built, block, draft, gen, dtype, validate, grad_flags, only_backward, result)
    result.seconds = time.perf_counter() - start
    return result


def _plan(block: generic.Block, covered: Callable[[str], str] | None, backward: bool,
          fused: bool) -> tuple[str, bool, str]:
    """(why a template covers it, whether it is captured for its backward only, why it is too large)."""
    reason = covered(block.path) if covered and not fused else ""
    only_backward = bool(reason) and backward and backward_kind(block) in BACKWARD_PAST_TEMPLATES
    size = _parameter_count(block)
    return reason, only_backward, TOO_LARGE.format(size / 1e9) if size > MAX_BLOCK_PARAMS else ""


def _backward(built: BuiltModel, block: generic.Block, draft: Draft, gen: codegen.Generated, dtype: torch.dtype,
              validate: bool, grad_flags: dict, only_backward: bool, result: BlocksResult) -> None:
    derived = backward_check.derive(built, block, draft, gen, dtype, validate, grad_flags)
    if derived is None:
        return
    result.validations += [derived.validation] if derived.validation else []
    if derived.draft is not None:
        if only_backward:  # its forward is the template's problem; this one is not written
            derived.draft.hints["backward_of"] = f"{draft.name} (not written: a family template's " \
                                                 f"problem covers {block.path}'s forward)"
        _add_backward(result, derived.draft)
    else:
        result.not_emitted.append(NotEmitted(block.path, f"{block.class_name} backward", derived.reason))


@dataclass
class _Taken:
    """What a forked worker found for one block (`_work_ahead`): its forward draft and what it reported. It
    changed nothing the others read: a block that may refuse the far recording is sent only once the
    recording is made, when a refusal no longer counts (`_sent_ahead`)."""

    draft: Draft | None
    validations: list[Validation]
    not_emitted: list[NotEmitted]
    notes: list[str]


def _sent_ahead(built: BuiltModel, kinds: list[generic.Block], plans: list, points: list[dict[str, int]],
                dtype: torch.dtype, large: far_calls.LargeCalls, validate: bool) -> list[int]:
    """The blocks a worker may run before their turn: captured here, not met earlier in the run, and independent
    of the others. What blocks share is the model's far recording. Where no block before the first that reads
    it may refuse it (its sizes vary and its first two calls made different numbers of tensors), one process
    would record it there: it is recorded now, before the workers fork, and every block is independent.
    Otherwise the blocks that may refuse it or read it run here at their turn, as in one process."""
    sent: list[int] = []
    unsettled = False  # a block that may refuse the recording comes before it is made
    for index, (block, (reason, _, too_large)) in enumerate(zip(kinds, plans)):
        if reason or too_large:
            continue
        reads = False
        if large.recorded is None:
            refuses = far_calls.may_refuse(block)
            reads = capture.varying_dims(block.calls[:2]) is not None and not large.own_scale(block)
            unsettled = unsettled or refuses
            if unsettled and (reads or refuses):
                continue  # before its key: a key reads the recording (`block_reuse.key`), and would make it
        if block_reuse.lookup(block_reuse.key(built, block, points, dtype, large, validate=validate,
                                              only_backward=False)):
            continue
        if reads:
            large.record()
        sent.append(index)
    return sent


def _work_ahead(built: BuiltModel, block: generic.Block, points: list[dict[str, int]], dtype: torch.dtype,
                large: far_calls.LargeCalls, validate: bool) -> _Taken:
    part = BlocksResult()
    forward = _validated_forward(built, block, points, dtype, large, validate, part, False, lambda step: None)
    return _Taken(forward[0] if forward else None, part.validations, part.not_emitted, part.notes)


def _add_backward(result: BlocksResult, draft: Draft) -> None:
    """Add a backward draft; two blocks whose forwards differ only where no gradient flows (Gemma 3's
    sliding and full attention layers: the mask is an input) give the same backward, written once for
    both."""
    same = next((d for d in result.drafts if d.name == draft.name), None)
    if same is None:
        result.drafts.append(draft)
        return
    paths = list(same.hints.get("module_paths", []))  # a copy: the forward's hints hold the same list
    same.hints["module_paths"] = (paths + [p for p in draft.hints.get("module_paths", []) if p not in paths])[:32]


def _label(block: generic.Block, only_backward: bool) -> str:
    return f"{block.class_name} backward" if only_backward else block.class_name


def _forward_once(built: BuiltModel, block: generic.Block, points: list[dict[str, int]], dtype: torch.dtype,
                  large: far_calls.LargeCalls, validate: bool, result: BlocksResult, only_backward: bool,
                  tell: Callable[[str], None], shareable: bool,
                  taken: Callable[[], _Taken | None] | None = None) -> tuple[Draft, codegen.Generated] | None:
    """`_validated_forward`, or what it gave for the same block earlier in this run (`block_reuse`), or what
    a worker found for it ahead of its turn (`taken`; without the generated code, which only a backward reads)."""
    key = block_reuse.key(built, block, points, dtype, large, validate=validate,
                          only_backward=only_backward) if shareable else None
    seen = block_reuse.lookup(key)
    if seen is None:
        validations, not_emitted, notes = len(result.validations), len(result.not_emitted), len(result.notes)
        ahead = taken() if taken else None
        if ahead is None:
            forward = _validated_forward(built, block, points, dtype, large, validate, result, only_backward, tell)
        else:
            result.ahead += 1
            result.validations += ahead.validations
            result.not_emitted += ahead.not_emitted
            result.notes += ahead.notes
            forward = (ahead.draft, None) if ahead.draft is not None else None
        block_reuse.remember(key, block_reuse.Seen(forward, result.validations[validations:],
                                                   result.not_emitted[not_emitted:], result.notes[notes:]))
        return forward
    tell(f"{block.class_name}: as extracted for an earlier model")
    seen = block_reuse.told_for(seen, block)
    result.validations += seen.validations
    result.not_emitted += seen.not_emitted
    result.notes += seen.notes
    return seen.forward


def _validated_forward(built: BuiltModel, block: generic.Block, points: list[dict[str, int]], dtype: torch.dtype,
                       large: far_calls.LargeCalls, validate: bool, result: BlocksResult, only_backward: bool,
                       tell: Callable[[str], None]) -> tuple[Draft, codegen.Generated] | None:
    """The block's forward draft, validated against its module; None (and the reason in `result`) when it
    cannot be captured, runs at no workload, or does not match."""
    label = _label(block, only_backward)
    try:
        draft, gen, sizes = _draft(built, block, points, dtype, large)
    except Exception as exc:  # noqa: BLE001 - one block failing must not stop the model; it is reported
        why = f"not captured: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        result.not_emitted.append(NotEmitted(block.path, label, why))
        return None
    if not sizes.kept:
        result.not_emitted.append(NotEmitted(block.path, label,
                                             f"no workload its reference runs at: {sizes.dropped[0][1]}"))
        return None
    if validate:
        tell(f"validating {draft.name}")
        check = generic_check.check(draft, block, gen)
        if not check.passed and generic_check.SDPA_CALL in draft.code:
            check = generic_check.with_math_attention(draft, block, gen, lambda: _name(draft, block, dtype)) or check
        result.validations.append(check)
        if not check.passed:
            what = "its forward (what the backward is traced from) " if only_backward else ""
            result.not_emitted.append(NotEmitted(block.path, label,
                                                 f"{what}failed validation: {check.message.strip()}"))
            return None
    if sizes.dropped:
        result.notes.append(f"{draft.name} ({block.class_name}): {sizes.summary()}")
    return draft, gen


def _draft(built: BuiltModel, block: generic.Block, points: list[dict[str, int]], dtype: torch.dtype,
           large: far_calls.LargeCalls) -> tuple[Draft, codegen.Generated, workload_check.PointCheck]:
    """The block's draft, from an export whose code does not depend on the size it was traced at.

    Export follows the code path of the size it traces and may fix what it derives from it, without a guard:
    Mamba2 at 16 tokens sees one chunk of 256 and bakes a chunk count of 1; Qwen3-Next's gated delta rule
    unrolls its loop over chunks once. Such a reference runs, wrongly, at other sizes. So the block is
    exported again traced (on meta, free) past the model's largest sizes: the same code means it does not
    depend on them. Else a third trace further out is compared with the second (Mamba2: one padded path for
    every length), and that export is used; else only the sizes validation ran at are kept, and it says so.
    Where counting on fake tensors already shows a loop over a size (`far_calls.grows_past`), the far
    exports are skipped: they could only show the same. Where the traced export, run at the far size, does
    what a static export there records (`far_match`), the first export is confirmed without a dynamic one."""
    dynamic = capture.varying_dims(block.calls[:2])
    names = capture.input_names(block.module, block.calls[0])
    first_ep = _export(block, block.calls[0], dynamic)
    first = _drafted(built, block, points, dtype, first_ep, names)
    if dynamic is None:
        return first
    if _grows_with_size(block, dynamic, first_ep):
        large.refuse("a block of the model unrolls a loop over a size")
        return _validated_sizes_only(first, GROWS)
    far = large.calls(block)
    if not far and large.refused:
        return _validated_sizes_only(first, f"no trace past the model's largest sizes ({large.refused}): only "
                                            f"the validated sizes are kept")
    far = [call for call in far if capture.varying_dims([block.calls[0], call]) is not None]
    if far_calls.grows_past(block, far):
        return _validated_sizes_only(first, GROWS)
    if far and far_match.confirms(block, far[0], first_ep, lambda: _export(block, far[0], None)):
        return first
    traced = []
    for call in far:
        try:
            traced.append(_drafted(built, block, points, dtype, _export(block, call, dynamic), names))
        except Exception:  # noqa: BLE001 - this trace size does not export: it cannot confirm anything
            continue
        if traced[0][0].code == first[0].code:
            return first
        if len(traced) == 2:
            break
    if len(traced) == 2 and traced[0][0].code == traced[1][0].code and _var_axes(traced[0][0]) == _var_axes(first[0]):
        return traced[0]
    if not traced:
        return first  # no other size could be traced (the model refuses sizes past its largest)
    return _validated_sizes_only(first, "its code depends on the size it is traced at (a loop over a size, or a "
                                        "branch on one): only the validated sizes are kept")


def _grows_with_size(block: generic.Block, dynamic: list[set[int]], first_ep) -> bool:
    """Whether an export at the second capture size has another number of operations than the first: a loop
    over a size unrolled by the trace (Jamba's selective scan runs once per token). Tracing such a block past
    the model's largest sizes would unroll thousands of steps, and could only show that it depends on them.

    The recording counted the tensors each call's Python code made (`Call.ops`): where the two sizes made as
    many, the second export is skipped (a third of a model's exports); where not, that export decides."""
    if len(block.calls) < 2:  # `dynamic` is the first two calls' varying dims: _draft checked they vary
        return False
    first_ops, second_ops = block.calls[0].ops, block.calls[1].ops
    if first_ops is not None and first_ops == second_ops:
        return False
    try:
        second = _export(block, block.calls[1], dynamic)
    except Exception:  # noqa: BLE001 - not exportable at that size: the later checks decide
        return False
    return len(second.graph.nodes) != len(first_ep.graph.nodes)


def _parameter_count(block: generic.Block) -> int:
    return sum(p.numel() for p in block.module.parameters())


def _var_axes(draft: Draft) -> set[str]:
    return {name for name, spec in draft.axes.items() if spec[0] == "var"}


def _validated_sizes_only(drafted, why: str):
    """Keep only the workloads inside the range of sizes validation compares at."""
    draft, gen, sizes = drafted
    captured = draft.capture_points or []
    low = {a: min(p[a] for p in captured) for a in captured[0]} if captured else {}
    high = {a: max(p[a] for p in captured) for a in captured[0]} if captured else {}
    kept = []
    for point in sizes.kept:
        if all(low.get(a, v) <= v <= high.get(a, v) for a, v in point.items()):
            kept.append(point)
        else:
            sizes.dropped.append((point, why))
    sizes.kept = draft.workload_points = kept
    return draft, gen, sizes


def _export(block: generic.Block, call: capture.Call, dynamic: list[set[int]] | None):
    return eager_path.export(block.module, lambda: block_export.export_block(block.module, call, dynamic))


def _drafted(built: BuiltModel, block: generic.Block, points: list[dict[str, int]], dtype: torch.dtype, ep,
             names: list[str]) -> tuple[Draft, codegen.Generated, workload_check.PointCheck]:
    gen = codegen.generate(ep, dtype, names)
    draft = generic.make_draft(block, gen, built.model_id, points, built.workload_axes, dtype, name="")
    block.finish(draft)
    sizes = workload_check.check_points(ep, draft, generic.symbol_axes(gen, block, points))
    draft.workload_points = sizes.kept
    draft.name = _name(draft, block, dtype)
    draft.versions = dict(built.versions)
    return draft, gen, sizes


def _name(draft: Draft, block: generic.Block, dtype: torch.dtype) -> str:
    """`<module class>_<10 hex digits of its code, axes and declarations>`: equal blocks, one name."""
    identity = json.dumps([draft.code, draft.axes, [a.to_dict() for a in draft.inputs],
                           [a.to_dict() for a in draft.outputs]], sort_keys=True, default=str)
    return f"{block.op_type}_{hashlib.sha256(identity.encode()).hexdigest()[:10]}{DTYPE_SUFFIX.get(dtype, '')}"
