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

from solbench.extract import backward_check, capture, codegen, generic, generic_check, partition
from solbench.extract.built import BuiltModel
from solbench.extract.draft import Draft
from solbench.extract.partition import NotEmitted
from solbench.extract.validate import Validation

# A block is copied to CPU in fp32 and bf16 to be validated: past this many parameters (4 GB in fp32; a
# FLUX double-stream block has about 0.34 G, Qwen3-Next's 512-expert MoE layer 1.6 G) it is reported,
# not captured; its smaller parts are still emitted.
MAX_BLOCK_PARAMS = 10**9
TOO_LARGE = "too large to validate on CPU ({:.2f} G parameters); its parts are emitted"
DTYPE_SUFFIX = {torch.bfloat16: "", torch.float16: "_fp16", torch.float32: "_fp32"}


@dataclass
class BlocksResult:
    drafts: list[Draft] = field(default_factory=list)
    validations: list[Validation] = field(default_factory=list)
    not_emitted: list[NotEmitted] = field(default_factory=list)
    blocks: int = 0
    seconds: float = 0.0


def extract_blocks(built: BuiltModel, dtype: torch.dtype = torch.bfloat16, *, validate: bool = True,
                   covered: Callable[[str], str] | None = None,
                   progress: Callable[[str], None] | None = None, backward: bool = False) -> BlocksResult:
    """Drafts for every distinct block of `built` that `covered(path)` (a reason or "") does not claim;
    with `backward`, also the backward of each block of a kind that has one (`backward_check.derive`)."""
    start = time.perf_counter()
    tell = progress or (lambda step: None)
    result = BlocksResult()
    model = built.module
    if next(model.parameters()).dtype != dtype:  # built in another dtype: one capture per dtype
        model.to(dtype)
    points = capture.axis_points(built)
    tell(f"recording module calls at {len(points)} sizes")
    calls = [capture.record_calls(built, p, dtype) for p in points]
    kinds, result.not_emitted = partition.blocks(model, calls)
    result.blocks = len(kinds)
    grad_flags: dict = {}  # filled once, by the first block with a backward
    for number, block in enumerate(kinds, 1):
        reason = covered(block.path) if covered else ""
        if reason:
            result.not_emitted.append(NotEmitted(block.path, block.class_name, reason))
            continue
        size = sum(p.numel() for p in block.module.parameters())
        if size > MAX_BLOCK_PARAMS:
            result.not_emitted.append(NotEmitted(block.path, block.class_name, TOO_LARGE.format(size / 1e9)))
            continue
        tell(f"capturing {block.class_name} ({number}/{len(kinds)})")
        try:
            draft, gen = _draft(built, block, points, dtype)
        except Exception as exc:  # noqa: BLE001 - one block failing must not stop the model; it is reported
            why = f"not captured: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            result.not_emitted.append(NotEmitted(block.path, block.class_name, why))
            continue
        if validate:
            tell(f"validating {draft.name}")
            check = generic_check.check(draft, block, gen)
            result.validations.append(check)
            if not check.passed:
                result.not_emitted.append(NotEmitted(block.path, block.class_name,
                                                     f"failed validation: {check.message.strip()}"))
                continue
        result.drafts.append(draft)
        derived = backward_check.derive(built, block, draft, gen, dtype, validate, grad_flags) if backward else None
        if derived is not None:
            result.validations += [derived.validation] if derived.validation else []
            if derived.draft is not None:
                result.drafts.append(derived.draft)
            else:
                result.not_emitted.append(NotEmitted(block.path, f"{block.class_name} backward", derived.reason))
    result.seconds = time.perf_counter() - start
    return result


def _draft(built: BuiltModel, block: generic.Block, points: list[dict[str, int]], dtype: torch.dtype):
    dynamic = capture.varying_dims(block.calls[:2])
    ep = capture.export_block(block.module, block.calls[0], dynamic)
    gen = codegen.generate(ep, dtype, capture.input_names(block.module, block.calls[0]))
    draft = generic.make_draft(block, gen, built.model_id, points, built.workload_axes, dtype, name="")
    identity = json.dumps([draft.code, draft.axes, [a.to_dict() for a in draft.inputs],
                           [a.to_dict() for a in draft.outputs]], sort_keys=True, default=str)
    digest = hashlib.sha256(identity.encode()).hexdigest()[:10]
    draft.name = f"{block.op_type}_{digest}{DTYPE_SUFFIX.get(dtype, '')}"
    draft.versions = dict(built.versions)
    return draft, gen
