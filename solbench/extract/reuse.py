"""Models with the same architecture facts extract to the same problems: extract once per run, record each.

Fine-tunes and quantised copies keep their base's config (Llama-3.1-70B, Hermes-4-70B, Nova-70B-NVFP4 and
Llama-3.3-Nemotron-70B-Select share one): 19 of the 99 buildable shipped models repeat another's facts. A
transformers model's extraction is a function of its facts, the library versions, the dtype and the
options, never of its name, so a later model with the same key gets the earlier one's drafts, validations
and notes under its own config. What is written does not change: a problem two models share is written once
and records both, exactly as when each was extracted. Diffusers call recipes read the model id (FLUX.1
Kontext's reference image, Qwen-Image-Edit's second grid), so diffusers models are never shared. The memory
is this process's, lives only inside `session()` (a run over several models; never across runs, and not
while tests patch the pipeline between calls) and holds no module (drafts lose their validation hooks).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
from collections.abc import Iterator
from typing import Any

_RESULTS: dict[str, Any] | None = None  # in a session: key -> (first model id, its result without hooks)
_BLOCKS: dict[str, Any] | None = None  # in a session: block key -> what extracting it added (`block_reuse`)


@contextlib.contextmanager
def session() -> Iterator[None]:
    """Share results between the models extracted inside (nested sessions share the outer one's), and the
    blocks they share (`block_reuse`)."""
    global _RESULTS, _BLOCKS
    if _RESULTS is not None:
        yield
        return
    _RESULTS, _BLOCKS = {}, {}
    try:
        yield
    finally:
        _RESULTS = _BLOCKS = None


def blocks_seen() -> dict[str, Any] | None:
    """This session's blocks by `block_reuse.key`; None outside a session."""
    return _BLOCKS


def key(library: str, facts: dict[str, Any], family: str | None, kind: str, **options: Any) -> str | None:
    """What decides a model's extraction; None when it cannot be shared (a diffusers model)."""
    if library != "transformers" or not facts:
        return None
    text = json.dumps([facts, family, kind, options], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def shipped_key(model_id: str, **options: Any) -> str:
    """The key of a shipped model (its id when it has none): models with one key run in one process, so the
    later ones find the first's result."""
    from solbench.extract import configs

    entry = configs.shipped_models().get(model_id) or {}
    found = key(entry.get("library", "transformers"), entry.get("config") or {}, entry.get("family"),
                entry.get("kind", ""), **options)
    return found or model_id


def shipped_group(model_id: str, **options: Any) -> str:
    """Which process a shipped model goes to under `--jobs`: models with the same facts (the later ones
    reuse the first's whole extraction), and diffusers models with the same VAE class (FLUX.1, SD1.5, SDXL
    and SD3.5 share AutoencoderKL's blocks, FLUX.2 and its VAE AutoencoderKLFlux2's: `block_reuse`)."""
    from solbench.extract import configs

    entry = configs.shipped_models().get(model_id) or {}
    vae = (entry.get("components") or {}).get("vae") if entry.get("library") == "diffusers" else None
    if isinstance(vae, dict) and isinstance(vae.get("class"), str):
        return f"diffusers with {vae['class']}"
    return shipped_key(model_id, **options)


TEMPLATED_KINDS = ("dense LLM", "MoE")  # decoders whose layers family templates cover: seconds, not minutes


def shipped_slow(model_id: str) -> bool:
    """Whether a shipped model is likely a long one under `--jobs` (it starts first): every kind but the
    decoder LLMs goes through the generic capture (diffusion, vision, VL, audio, SSM), 25-130 s a model
    on 2 cores, against under 10 s for most templated decoders."""
    from solbench.extract import configs

    entry = configs.shipped_models().get(model_id) or {}
    return bool(entry) and entry.get("kind", "") not in TEMPLATED_KINDS


def lookup(result_key: str | None, config) -> Any:
    """An earlier model's result under `config`, or None. Its drafts are the earlier model's (they name it in
    their description; a problem shared by several models keeps the first model's draft either way)."""
    if result_key is None or _RESULTS is None or result_key not in _RESULTS:
        return None
    first, result = _RESULTS[result_key]
    reused = copy.copy(result)
    reused.config = config
    reused.drafts = list(result.drafts)
    reused.skipped = [*result.skipped, f"same architecture facts as {first}: its extraction is reused"]
    reused.seconds = reused.trace_seconds = reused.validate_seconds = 0.0
    return reused


def remember(result_key: str | None, result) -> None:
    """Keep `result` (drafts without their validation hooks, which hold the CPU model) for later models."""
    if result_key is None or _RESULTS is None or result_key in _RESULTS:
        return
    kept = copy.copy(result)
    kept.drafts = [dataclasses.replace(d, check=None) for d in result.drafts]
    _RESULTS[result_key] = (result.config.model_id, kept)
