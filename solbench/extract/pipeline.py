"""Model id in, validated problem drafts out: resolve the config, trace, draft, validate."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from solbench.extract import configs, emit
from solbench.extract.draft import Draft
from solbench.extract.families import drafts_for
from solbench.extract.trace import trace
from solbench.extract.validate import Validation, Validator


@dataclass
class ModelResult:
    config: configs.ModelConfig
    drafts: list[Draft]
    skipped: list[str] = field(default_factory=list)
    validations: list[Validation] = field(default_factory=list)
    layer_kinds: int = 0
    layers: int = 0
    seconds: float = 0.0
    trace_seconds: float = 0.0
    validate_seconds: float = 0.0

    @property
    def failed(self) -> list[Validation]:
        return [v for v in self.validations if not v.passed]


def extract_model(model_id: str, config_path: str | Path | None = None, *, validate: bool = True,
                  use_hub: bool = True, dtype: str = "bfloat16",
                  progress: Callable[[str], None] | None = None) -> ModelResult:
    """Trace one model and draft its problems; with `validate`, compare each with its module on CPU.

    `progress` hears each step (config, trace, every problem compared) as it starts."""
    start = time.perf_counter()
    tell = progress or (lambda step: None)
    tell("reading its config")
    config = configs.resolve(model_id, config_path, use_hub=use_hub)
    tell(f"tracing {config.model_type} on meta tensors")
    traced = trace(config)
    found = drafts_for(traced, dtype)
    result = ModelResult(config, found.drafts, found.skipped, layer_kinds=len(traced.kinds),
                         layers=len(traced.layers))
    result.trace_seconds = time.perf_counter() - start
    if validate:
        import torch

        t0 = time.perf_counter()
        validator = Validator(traced)
        result.validations = validator.validate_all(found.drafts, low_precision=getattr(torch, dtype),
                                                    progress=progress)
        failed = {v.problem for v in result.validations if not v.passed}
        result.drafts = [d for d in found.drafts if d.name not in failed]  # never emit a mismatch
        result.validate_seconds = time.perf_counter() - t0
    result.seconds = time.perf_counter() - start
    return result


# Libraries whose models this pipeline can build from shipped facts; the others are listed, not extracted.
LIBRARIES = ("transformers",)


def extractable_model_ids() -> list[str]:
    """The shipped models `--all` and `--check` extract: those a library here can build."""
    return [m for lib in LIBRARIES for m in configs.buildable_model_ids(lib)]


def collect(results: list[ModelResult]) -> dict[str, emit.Problem]:
    return emit.merge([(r.config, r.drafts) for r in results])
