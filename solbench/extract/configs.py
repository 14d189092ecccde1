"""Where a model's architecture comes from: --config, the HuggingFace cache/hub, or shipped facts.

Only `config.json` is ever read; weights are never needed because problems are traced on meta tensors.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from solbench.spec.errors import SpecError

DATA_FILE = Path(__file__).with_name("data") / "models.json"
# Keys that describe the checkpoint, not the computation; dropped before hashing and tracing.
_IGNORED_KEYS = frozenset({
    "architectures", "torch_dtype", "dtype", "transformers_version", "_name_or_path", "bos_token_id",
    "eos_token_id", "pad_token_id", "auto_map", "quantization_config", "use_cache", "initializer_range",
    "output_attentions", "output_hidden_states", "id2label", "label2id", "task_specific_params",
})


@dataclass(frozen=True)
class ModelConfig:
    """A model id plus the architecture facts that shape its kernels."""

    model_id: str
    facts: dict[str, Any]
    source: str  # "file:<path>", "huggingface", or "shipped"
    family: str | None = None

    @property
    def model_type(self) -> str:
        return self.facts["model_type"]

    @property
    def config_hash(self) -> str:
        """Identity of the architecture facts (stable across key order and sources)."""
        payload = json.dumps(self.facts, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


def shipped_models() -> dict[str, dict[str, Any]]:
    """The models solbench knows without a network: id -> {"family", "config"}."""
    return json.loads(DATA_FILE.read_text())["models"]


def known_model_ids() -> list[str]:
    return list(shipped_models())


def clean_facts(raw: dict[str, Any]) -> dict[str, Any]:
    """Keep what shapes the computation; multimodal configs contribute their text part."""
    if "text_config" in raw and "hidden_size" not in raw:
        text = dict(raw["text_config"])
        text.setdefault("model_type", raw.get("model_type", "") + "_text")
        raw = text
    if "model_type" not in raw:
        raise SpecError("config has no 'model_type'; is it a transformers config.json?")
    return {k: raw[k] for k in sorted(raw) if k not in _IGNORED_KEYS}


def from_file(model_id: str, path: str | Path) -> ModelConfig:
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise SpecError(f"config file {path} does not exist") from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"{path}: not valid JSON: line {exc.lineno}: {exc.msg}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: a config.json is a JSON object")
    return ModelConfig(model_id, clean_facts(raw), f"file:{path.name}", _family(model_id))


def from_huggingface(model_id: str) -> ModelConfig | None:
    """config.json from the local cache, or the hub when online; None when neither has it."""
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        return None
    try:
        path = hf_hub_download(model_id, "config.json", local_files_only=_offline())
    except Exception:  # noqa: BLE001 - not cached, offline, gated, or no such repo: all mean "not here"
        return None
    cfg = from_file(model_id, path)
    return ModelConfig(model_id, cfg.facts, "huggingface", _family(model_id))


def from_shipped(model_id: str) -> ModelConfig | None:
    entry = shipped_models().get(model_id)
    if entry is None:
        return None
    return ModelConfig(model_id, clean_facts(entry["config"]), "shipped", entry["family"])


def resolve(model_id: str, config_path: str | Path | None = None, *, use_hub: bool = True) -> ModelConfig:
    """The config for `model_id`: --config first, then the HuggingFace cache/hub, then shipped facts.

    `use_hub=False` pins the shipped facts: `--all` and `--check` use it so that the shipped problems
    do not depend on what happens to be in this machine's cache.
    """
    if config_path is not None:
        return from_file(model_id, config_path)
    if use_hub:
        found = from_huggingface(model_id)
        if found is not None:
            return found
    found = from_shipped(model_id)
    if found is not None:
        return found
    known = "\n  ".join(known_model_ids())
    raise SpecError(
        f"no config for {model_id!r}: it is not in the HuggingFace cache, the hub is not reachable "
        f"(HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', '')!r}), and solbench ships no facts for it.\n"
        f"Pass one with --config path/to/config.json, or pick a known model:\n  {known}")


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def _family(model_id: str) -> str | None:
    entry = shipped_models().get(model_id)
    return entry["family"] if entry else None
