"""Where a model's architecture comes from: --config, the HuggingFace cache/hub, or shipped facts.

Only `config.json` is ever read; weights are never needed because problems are traced on meta tensors.
A name that begins known model ids at a word boundary (`Qwen/Qwen3`) stands for that family of models.
Shipped entries say which library defines the model (transformers, diffusers) or, for a model that only
exists as remote code or in another framework, the reason solbench cannot build it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solbench.extract import hub
from solbench.spec.errors import SpecError

DATA_FILE = Path(__file__).with_name("data") / "models.json"
# Keys that describe the checkpoint, not the computation; dropped before hashing and tracing.
_IGNORED_KEYS = frozenset({
    "architectures", "torch_dtype", "dtype", "transformers_version", "_name_or_path", "bos_token_id",
    "eos_token_id", "pad_token_id", "auto_map", "quantization_config", "use_cache", "initializer_range",
    "output_attentions", "output_hidden_states", "id2label", "label2id", "task_specific_params",
})
# Sub-configs that hold a composite model's decoder; the whole config is kept, the templates read this part.
COMPOSITE_KEYS = ("text_config", "thinker_config")
LIBRARIES = ("transformers", "diffusers")
# Where a family name may end inside a model id: "Qwen/Qwen3" + "-8B", "meta-llama/Llama-3" + ".1-8B".
_BOUNDARIES = "-_./"


@dataclass(frozen=True)
class ModelConfig:
    """A model id plus the architecture facts that shape its kernels."""

    model_id: str
    facts: dict[str, Any]
    source: str  # "file:<path>", "huggingface", or "shipped"
    family: str | None = None
    kind: str = ""  # "dense LLM" | "MoE" | "VL" | "diffusion" | "audio" | "SSM" | "vision"
    library: str = "transformers"  # "transformers" | "diffusers" | "parts"
    # diffusers models: component name -> {"class": ..., "config": {...}}; a model built from transformers
    # parts ("parts": canary-qwen, a FastConformer encoder and a Qwen3 LLM): name -> {"model": a shipped id}
    # or {"config": a transformers config}; facts are then empty
    components: dict[str, Any] = field(default_factory=dict)

    @property
    def model_type(self) -> str:
        return self.facts.get("model_type", "")

    @property
    def is_composite(self) -> bool:
        """A VL/omni/speech config: its decoder lives in a sub-config (text_config, thinker_config)."""
        return "hidden_size" not in self.facts and any(k in self.facts for k in COMPOSITE_KEYS)

    @property
    def config_hash(self) -> str:
        """Identity of the architecture facts (stable across key order and sources)."""
        facts = self.facts if self.facts or not self.components else {"components": self.components}
        payload = json.dumps(facts, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


def shipped_models() -> dict[str, dict[str, Any]]:
    """The models solbench knows without a network: id -> {"family", "kind", "library", "config" or
    "components" or "reason", "source", "confidence"}."""
    return json.loads(DATA_FILE.read_text())["models"]


def known_model_ids() -> list[str]:
    return list(shipped_models())


def unbuildable_reason(model_id: str) -> str | None:
    """Why a shipped model cannot be built (remote code, another framework); None when it can."""
    entry = shipped_models().get(model_id)
    return entry.get("reason") if entry else None


def buildable_model_ids(library: str | None = None) -> list[str]:
    """Shipped models that transformers/diffusers can build (all, or one library's)."""
    return [m for m, e in shipped_models().items() if "reason" not in e
            and (library is None or e.get("library", "transformers") == library)]


@dataclass(frozen=True)
class Selection:
    """What a `--model` name stands for: one model id, or the known models of a family."""

    name: str
    model_ids: tuple[str, ...]
    family: bool = False


def select(name: str) -> Selection:
    """A known id (any letter case) is that model; a name that begins known ids at a word boundary, below
    the organisation (`Qwen/Qwen3`, `meta-llama/Llama-3`), is their family; anything else is one model id
    for the cache or the hub."""
    known = known_model_ids()
    exact = [m for m in known if m.lower() == name.lower()]
    if exact:
        return Selection(name, (exact[0],))
    members = tuple(m for m in known if _begins_family(name, m))
    if members:
        return Selection(name, members, family=True)
    return Selection(name, (name,))


def _begins_family(prefix: str, model_id: str) -> bool:
    org, _, model = prefix.partition("/")
    if not org or not model or not model_id.lower().startswith(prefix.lower()) or len(model_id) == len(prefix):
        return False
    return prefix[-1] in _BOUNDARIES or model_id[len(prefix)] in _BOUNDARIES


def family_suggestions(name: str) -> list[str]:
    """Family names the user may have meant: `Qwen/Qwen` -> Qwen/Qwen2.5, Qwen/Qwen3; `Qwen3` -> Qwen/Qwen3."""
    lowered = name.lower()
    found = set()
    for model_id in known_model_ids():
        org, _, model = model_id.partition("/")
        if model_id.lower().startswith(lowered):
            start = len(name)
        elif "/" not in name and model.lower().startswith(lowered):
            start = len(org) + 1 + len(name)
        else:
            continue
        cut = min((i for i in range(max(start, len(org) + 2), len(model_id)) if model_id[i] in "-_"),
                  default=len(model_id))
        found.add(model_id[:cut])
    return sorted(found)


def clean_facts(raw: dict[str, Any]) -> dict[str, Any]:
    """Keep what shapes the computation, sub-configs included (a VL model keeps its vision tower)."""
    if not isinstance(raw.get("model_type"), str) or not raw["model_type"]:
        raise SpecError("config has no 'model_type'; is it a transformers config.json?")
    return _cleaned(raw)


def _cleaned(raw: dict[str, Any]) -> dict[str, Any]:
    return {k: (_cleaned(raw[k]) if k.endswith("_config") and isinstance(raw[k], dict) else raw[k])
            for k in sorted(raw) if k not in _IGNORED_KEYS}


def read_json_object(path: str | Path, what: str) -> dict[str, Any]:
    """A JSON object from a file the user named, or a one-line SpecError (missing, not JSON, not an object)."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise SpecError(f"config file {path} does not exist") from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"{path}: not valid JSON: line {exc.lineno}: {exc.msg}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: {what} is a JSON object")
    return raw


def from_file(model_id: str, path: str | Path) -> ModelConfig:
    path = Path(path)
    raw = read_json_object(path, "a config.json")
    if raw.get("library") == "parts":  # a model built from parts: {"library": "parts", "components": {...}}
        return ModelConfig(model_id, {}, f"file:{path.name}", _family(model_id), _entry(model_id).get("kind", ""),
                           "parts", _parts(model_id, raw.get("components")))
    return ModelConfig(model_id, clean_facts(raw), f"file:{path.name}", _family(model_id),
                       _entry(model_id).get("kind", ""))


def _parts(model_id: str, components: Any) -> dict[str, Any]:
    """A parts model's components, each {"model": a known id} or {"config": a transformers config}."""
    if not isinstance(components, dict) or not components:
        raise SpecError(f"{model_id}: a parts model needs a non-empty 'components' object")
    for name, part in components.items():
        if not isinstance(part, dict) or not (isinstance(part.get("model"), str)
                                              or isinstance(part.get("config"), dict)):
            raise SpecError(f"{model_id}: part {name!r} needs a 'model' id or a 'config' object")
    return components


def from_huggingface(model_id: str) -> ModelConfig | None:
    """config.json from the local cache, or the hub when online; None when neither has it."""
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        return None
    try:
        path = hf_hub_download(model_id, "config.json", local_files_only=not hub.reach().online)
    except Exception:  # noqa: BLE001 - not cached, offline, gated, or no such repo: all mean "not here"
        return None
    cfg = from_file(model_id, path)
    return ModelConfig(model_id, cfg.facts, "huggingface", _family(model_id), _entry(model_id).get("kind", ""))


def from_shipped(model_id: str) -> ModelConfig | None:
    entry = shipped_models().get(model_id)
    if entry is None:
        return None
    if "reason" in entry:
        raise SpecError(f"{model_id}: cannot be extracted: {entry['reason']}")
    library = entry.get("library", "transformers")
    if library in ("diffusers", "parts"):
        return ModelConfig(model_id, {}, "shipped", entry["family"], entry.get("kind", ""), library,
                           _parts(model_id, entry["components"]) if library == "parts" else entry["components"])
    return ModelConfig(model_id, clean_facts(entry["config"]), "shipped", entry["family"], entry.get("kind", ""))


def resolve(model_id: str, config_path: str | Path | None = None, *, use_hub: bool = True) -> ModelConfig:
    """The config for `model_id`: --config first, then the HuggingFace cache/hub, then shipped facts.

    `use_hub=False` pins the shipped facts: `--all` and `--check` use it so that the shipped problems
    do not depend on what happens to be in this machine's cache.
    """
    if config_path is not None:
        return from_file(model_id, config_path)
    reason = unbuildable_reason(model_id)
    if reason is not None:
        raise SpecError(f"{model_id}: cannot be extracted: {reason}")
    if use_hub:
        found = from_huggingface(model_id)
        if found is not None:
            return found
    found = from_shipped(model_id)
    if found is not None:
        return found
    raise SpecError(unknown_model_message(model_id, use_hub))


def unknown_model_message(name: str, hub_consulted: bool = True) -> str:
    """Why `name` has no config, what it may have meant, and every model known offline."""
    reach = hub.reach() if hub_consulted else None
    if reach is None:
        where = "solbench ships no facts for it"
    elif reach.online:
        where = "the HuggingFace cache and hub have no config.json for it, and solbench ships no facts for it"
    else:
        where = (f"it is not in the HuggingFace cache, the hub cannot be asked ({reach.reason}), and solbench "
                 f"ships no facts for it")
    suggestions = family_suggestions(name)
    hint = f"\n{name!r} is neither a known model nor a family name; did you mean {', '.join(suggestions)}?" \
        if suggestions else ""
    known = "\n  ".join(f"{m:50s} {e['family']}" for m, e in shipped_models().items() if "reason" not in e)
    return (f"no config for {name!r}: {where}.{hint}\n"
            f"Pass one with --config path/to/config.json, name a family (e.g. Qwen/Qwen3: every known model whose "
            f"id begins so), or pick a known model:\n  {known}")


def _entry(model_id: str) -> dict[str, Any]:
    return shipped_models().get(model_id) or {}


def _family(model_id: str) -> str | None:
    return _entry(model_id).get("family")
