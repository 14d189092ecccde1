"""Model id in, validated problem drafts out: resolve the config, trace, draft, validate."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from solbench.extract import configs, copies, emit, reuse
from solbench.extract.draft import Draft
from solbench.extract.families import drafts_for
from solbench.extract.trace import trace
from solbench.extract.validate import Validation, Validator
from solbench.spec.errors import SpecError, first_line


@dataclass(frozen=True)
class Reach:
    """What the generic capture adds past the defaults (each multiplies CPU validation time): backward
    problems, encoders a token-id call never reaches, attention and layers with the RoPE table inside."""

    backward: bool = False
    encoders: bool = False
    rope_inside: bool = False


@dataclass
class ModelResult:
    config: configs.ModelConfig
    drafts: list[Draft]
    skipped: list[str] = field(default_factory=list)
    not_emitted: list[str] = field(default_factory=list)  # generic capture: blocks it could not emit, why
    left_out: list[str] = field(default_factory=list)  # generic capture: modules left out by design, why
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
                  use_hub: bool = True, dtype: str = "bfloat16", generic: bool = False,
                  progress: Callable[[str], None] | None = None, backward: bool = False,
                  encoders: bool = False, rope_inside: bool = False) -> ModelResult:
    """Trace one model and draft its problems; with `validate`, compare each with its module on CPU; with
    `encoders`, also the encoders its token-id call never reaches (`towers`: vision towers, audio encoders);
    with `rope_inside`, also its attention and layers with the RoPE table computed inside (`rope_inside`).

    Models no family template knows go through the generic capture (`blocks.py`); so do the layers and
    sub-blocks a template skipped or failed to validate (a hybrid's conv, Mamba or linear-attention
    mixers), and with `generic` the blocks outside the templates' layer stack too. `progress` hears each step (config, trace, every problem compared) as it starts."""
    start = time.perf_counter()
    tell = progress or (lambda step: None)
    tell("reading its config")
    config = configs.resolve(model_id, config_path, use_hub=use_hub)
    reach = Reach(backward, encoders, rope_inside)
    result_key = reuse.key(config.library, config.facts, config.family, config.kind, validate=validate,
                           dtype=dtype, generic=generic, backward=backward, encoders=encoders,
                           rope_inside=rope_inside)
    result = reuse.lookup(result_key, config)
    if result is None:
        try:
            result = _extract(config, validate, dtype, generic, tell, start, reach)
        finally:
            copies.release_weights()  # the next model's blocks have other sizes
        reuse.remember(result_key, result)
    return result


def _extract(config: configs.ModelConfig, validate: bool, dtype: str, generic: bool, tell: Callable[[str], None],
             start: float, reach: Reach = Reach()) -> ModelResult:
    """extract_model's work for a resolved config: family templates where they apply, else generic."""
    if config.library == "diffusers":
        return _extract_diffusers(config, dtype, validate, tell, start, reach)
    if config.library == "parts":
        return _extract_parts(config, dtype, validate, tell, start, reach)
    tell(f"tracing {config.model_type} on meta tensors")
    try:
        traced = trace(config)
        found = drafts_for(traced, dtype)
        why = "" if _templates_apply(found.drafts) else "no family template recognises its layers"
    except SpecError as exc:
        why = str(exc)
    if why:  # every block goes through the generic capture
        result = ModelResult(config, [], [f"family templates: {why}"])
        _generic(result, config, dtype, validate, tell, reach)
        result.seconds = time.perf_counter() - start
        return result
    result = ModelResult(config, found.drafts, found.skipped, layer_kinds=len(traced.kinds),
                         layers=len(traced.layers))
    result.trace_seconds = time.perf_counter() - start
    if validate:
        import torch

        t0 = time.perf_counter()
        validator = Validator(traced)
        result.validations = validator.validate_all(found.drafts, low_precision=getattr(torch, dtype),
                                                    progress=tell)
        failed = {v.problem for v in result.validations if not v.passed}
        result.drafts = [d for d in found.drafts if d.name not in failed]  # never emit a mismatch
        result.validate_seconds = time.perf_counter() - t0
    # what a template skipped or got wrong goes generic; with `backward`, so do the attention and layer
    # blocks whose backward the templates do not cover at the module's boundary (`blocks.BACKWARD_PAST_TEMPLATES`);
    # with `rope_inside`, so do attention and layers fused with their rotary table (no template takes positions)
    needed = bool(generic or found.skipped or result.failed)
    main = needed or reach.backward or reach.rope_inside
    if main or reach.encoders:
        try:
            kept = {d.name for d in result.drafts}
            dropped = [d for d in found.drafts if d.name not in kept]
            _generic(result, config, dtype, validate, tell, reach, main=main,
                     covered=lambda built: _family_paths(traced, built, result.drafts, dropped, not needed))
        except SpecError as exc:
            result.skipped.append(f"generic capture: {exc}")
    result.seconds = time.perf_counter() - start
    return result


def libraries() -> tuple[str, ...]:
    """Libraries whose models this build can extract: transformers (and models built from its parts), and
    diffusers when both diffusers and its builder (`build_diffusers`) are installed."""
    import importlib.util

    have = ["transformers", "parts"]
    if importlib.util.find_spec("diffusers") and importlib.util.find_spec("solbench.extract.build_diffusers"):
        have.append("diffusers")
    return tuple(have)


def extractable_model_ids() -> list[str]:
    """The shipped models `--all` and `--check` extract: those a library here can build."""
    return [m for lib in libraries() for m in configs.buildable_model_ids(lib)]


def extract_built(built, facts: dict, *, validate: bool = True, dtype: str = "bfloat16",
                  progress: Callable[[str], None] | None = None, backward: bool = False,
                  rope_inside: bool = False) -> ModelResult:
    """A `BuiltModel` from elsewhere (`--module`) through the generic capture; `facts` (what it was built
    from) are its identity in the problems it writes."""
    start = time.perf_counter()
    config = configs.ModelConfig(built.model_id, facts, f"module:{built.model_id}", kind=built.family)
    result = ModelResult(config, [])
    _add_blocks(result, [built], dtype, validate, progress or (lambda step: None),
                Reach(backward=backward, rope_inside=rope_inside))
    result.seconds = time.perf_counter() - start
    return result


def _extract_diffusers(config: configs.ModelConfig, dtype: str, validate: bool, tell: Callable[[str], None],
                       start: float, reach: Reach = Reach()) -> ModelResult:
    """Every component of a diffusers model (each path through it a BuiltModel) through the generic capture."""
    import torch

    if "diffusers" not in libraries():
        raise SpecError(f"{config.model_id}: a diffusers model, and this build has no diffusers builder "
                        f"(install the extract extra)")
    from solbench.extract import build_diffusers

    tell("building its diffusers components on meta tensors")
    try:
        built_models = build_diffusers.build_diffusers(config.model_id, {"components": config.components},
                                                       getattr(torch, dtype))
    except Exception as exc:  # noqa: BLE001 - a component diffusers cannot build: one line, exit 2
        raise SpecError(f"{config.model_id}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    result = ModelResult(config, [])
    _add_blocks(result, built_models, dtype, validate, tell, reach)
    result.skipped += [f"{name}: the same class and config as {first}: its problems are {first}'s"
                       for name, first in build_diffusers.repeated_components(config.components).items()]
    if reach.encoders:
        _text_encoders(result, config, dtype, validate, tell, reach)
    result.seconds = time.perf_counter() - start
    return result


def _text_encoders(result: ModelResult, config: configs.ModelConfig, dtype: str, validate: bool,
                   tell: Callable[[str], None], reach: Reach) -> None:
    """A diffusers model's transformers text encoder (`"model"`: the shipped entry it is, e.g. Qwen-Image's
    Qwen2.5-VL-7B) extracted as that model is, and its problems counted as this model's too: the prompt is
    encoded on every generation, so its layers are this model's work as much as the denoiser's."""
    for name, component in config.components.items():
        ref = component.get("model") if isinstance(component, dict) else None
        if ref:
            _add_part(result, name, ref, partial(_part_config, config, name, component), dtype, validate, tell,
                      replace(reach, encoders=False))


def _extract_parts(config: configs.ModelConfig, dtype: str, validate: bool, tell: Callable[[str], None],
                   start: float, reach: Reach) -> ModelResult:
    """A model no library defines whole, built from parts transformers defines (canary-qwen: a FastConformer
    encoder and a Qwen3 LLM): each part extracted as a model of its own, its problems counted as this
    model's. A part is a shipped model (`"model"`) or a transformers config (`"config"`)."""
    result = ModelResult(config, [])
    for name, component in config.components.items():
        label = component.get("model") or f"{config.model_id}:{name}"
        _add_part(result, name, label, partial(_part_config, config, name, component), dtype, validate, tell, reach)
    if not result.drafts and result.skipped:
        raise SpecError(f"{config.model_id}: no part could be extracted: {result.skipped[0]}")
    result.seconds = time.perf_counter() - start
    return result


def _part_config(model: configs.ModelConfig, name: str, component: dict) -> configs.ModelConfig:
    """A part's config: the shipped model it names, or its own transformers config (named model:part)."""
    if component.get("model"):
        return configs.resolve(component["model"], None, use_hub=False)
    return configs.ModelConfig(f"{model.model_id}:{name}", configs.clean_facts(component["config"]), model.source,
                               model.family, model.kind)


def _add_part(result: ModelResult, name: str, label: str, part: Callable[[], configs.ModelConfig], dtype: str,
              validate: bool, tell: Callable[[str], None], reach: Reach) -> None:
    """Extract the model `part()` resolves to and add what it gives to `result` (a problem already there is kept
    once); a part that cannot be resolved or extracted is reported, and the others are still extracted."""
    tell(f"extracting its {name}, {label}")
    try:
        sub = _extract(part(), validate, dtype, False, tell, time.perf_counter(), reach)
    except SpecError as exc:
        result.skipped.append(f"{name} ({label}): {exc}")
        return
    known = {d.name for d in result.drafts}
    result.drafts += [d for d in sub.drafts if d.name not in known]
    result.validations += sub.validations
    result.skipped += [f"{name} ({label}): {line}" for line in sub.skipped]
    result.not_emitted += sub.not_emitted
    result.left_out += sub.left_out


def _generic(result: ModelResult, config: configs.ModelConfig, dtype: str, validate: bool,
             tell: Callable[[str], None], reach: Reach, main: bool = True,
             covered: Callable[[object], Callable[[str], str]] | None = None) -> None:
    """Add generic drafts for the blocks no family template covered (`covered(built)` says which, by path
    in the built model); report every module left out. With `encoders`, also the encoders the model's call
    never reaches (`towers`); without `main`, only those."""

    from solbench.extract import build, towers

    try:
        built = build.build_transformers(config.model_id, config.facts, config.family or "")
    except SpecError:
        raise
    except Exception as exc:  # noqa: BLE001 - a config transformers cannot build is bad input: one line, exit 2
        raise SpecError(f"{config.model_id}: transformers cannot build it: {first_line(exc)}") from None
    result.skipped += [f"not emitted: {name} ({why})" for name, why in built.unbuilt.items()]
    parts = ([built] if main else []) + (towers.encoders(built) if reach.encoders else [])
    if parts:
        _add_blocks(result, parts, dtype, validate, tell, reach, covered(built.module) if covered else None)


def _add_blocks(result: ModelResult, built_models: list, dtype: str, validate: bool, tell: Callable[[str], None],
                reach: Reach, covered: Callable[[str], str] | None = None) -> None:
    """The generic capture of BuiltModels (a diffusers model's paths: encode, decode, denoise), added to
    `result`; every module left out is reported, a module no path calls once for all of them."""
    import torch

    from solbench.extract import blocks
    from solbench.extract.partition import NOT_CALLED

    left, called = [], set()
    for built in built_models:
        # an encoder tower (`root`) is never a template's: `covered` names paths of the whole model
        found = blocks.extract_blocks(built, getattr(torch, dtype), validate=validate,
                                      covered=None if built.root else covered, backward=reach.backward,
                                      progress=tell, rope_inside=reach.rope_inside)
        if built.root:
            _in_model(found, built.root)
        known = {d.name for d in result.drafts}
        result.drafts += [d for d in found.drafts if d.name not in known]
        result.validations += found.validations
        left += found.not_emitted
        result.skipped += [f"workloads: {line}" for line in found.notes]
        idle = {item.path for item in found.not_emitted if item.reason == NOT_CALLED}
        called |= {_joined(built.root, path) for path, _ in built.module.named_modules()} - idle
    # a module one path never calls (the VAE's decoder when encoding) counts if no path calls it; each once
    left = list({(i.path, i.class_name, i.reason): i for i in left
                 if i.reason != NOT_CALLED or i.path not in called}.values())
    gaps = summarise([item for item in left if not item.by_design])
    result.not_emitted += gaps
    result.left_out += summarise([item for item in left if item.by_design])
    result.skipped += [f"not emitted: {line}" for line in gaps]


def _joined(root: str, path: str) -> str:
    return f"{root}.{path}" if root and path else root or path


def _in_model(found, root: str) -> None:
    """An encoder tower's paths as the whole model names them (`audio_tower.layers.0`)."""
    for item in found.not_emitted:
        item.path = _joined(root, item.path)
    for draft in found.drafts:
        if "module_paths" in draft.hints:
            draft.hints["module_paths"] = [_joined(root, p) for p in draft.hints["module_paths"]]


def _templates_apply(drafts: list[Draft]) -> bool:
    """Whether the family templates recognised a layer's attention or feed-forward (not only norms,
    the embedding and the head)."""
    return any(d.check is not None and d.check.module.startswith("layer") and d.op_type != "norm"
               for d in drafts)


def summarise(left: list) -> list[str]:
    """One line per (class, reason): how many modules, and the first path."""
    groups: dict[tuple[str, str], list[str]] = {}
    for item in left:
        groups.setdefault((item.class_name, item.reason), []).append(item.path)
    return [f"{cls} x{len(paths)} (e.g. {paths[0] or 'the model'}): {reason}"
            for (cls, reason), paths in groups.items()]


ONLY_BACKWARD = ("left to the family templates' problems (the generic capture ran only for what they do not write: "
                 "backward problems, RoPE tables computed inside)")


def _family_paths(traced, built_model, drafts: list[Draft], dropped: list[Draft] = (),
                  only_backward: bool = False) -> Callable[[str], str]:
    """What the family templates drafted (and validation kept) is theirs; everything else is generic
    (with `only_backward`, where the templates left nothing out, nothing is: the generic capture runs for
    the backward of the templates' attention and layers alone).

    Inside the layer stack a layer kind's fused problem claims its whole layer; otherwise each child
    (attention, MLP, norm) with a kept template draft is claimed and the rest of the layer, the layer
    itself included, goes to the generic capture (a hybrid's conv, Mamba or linear-attention mixer).
    The generic capture builds the whole model (a VL model's vision tower too) where the templates traced
    its decoder: paths are mapped between the two through the layer stack's place in each."""
    from solbench.extract.trace import layer_signature

    stack = next((p for p, m in traced.model.named_modules() if m is traced.layers), None)
    kind_of = {k.signature: k.index for k in traced.kinds}
    layer_kind = [kind_of.get(layer_signature(layer)) for layer in traced.layers]
    claimed: dict[int, set[str]] = {}
    model_level = {"", "model.embed_tokens", "lm_head", "model.norm"}
    for kept, group in ((True, drafts), (False, dropped)):  # a child with any failed template draft is not theirs
        for draft in group:
            scope, colon, sub = draft.check.module.partition(":") if draft.check else ("", "", "")
            if colon and scope.startswith("layer") and scope[5:].isdigit():
                names = claimed.setdefault(int(scope[5:]), set())
                (names.add if kept else names.discard)(sub.split(".")[0])  # "" = the fused layer
            elif colon and scope == "model" and kept:
                model_level.add(sub)  # the final norm, the rotary table
    to_traced = _path_map(stack, traced.layers, built_model)

    def covered(built_path: str) -> str:
        path = to_traced(built_path)
        if stack is not None and (path == stack or path.startswith(stack + ".")):
            index, _, rest = path[len(stack) + 1:].partition(".")
            kind = layer_kind[int(index)] if index.isdigit() and int(index) < len(layer_kind) else None
            mine = claimed.get(kind, set()) if kind is not None else set()
            if not index or "" in mine or (rest and rest.split(".")[0] in mine):
                return "covered by the family templates (attention, MLP, MoE, norms, fused layer)"
            return ONLY_BACKWARD if only_backward else ""
        if drafts and path in model_level:
            return "covered by the family templates (embedding, final norm, LM head, rotary table)"
        return ONLY_BACKWARD if only_backward else ""
    return covered


def _path_map(stack: str | None, layers, built_model) -> Callable[[str], str]:
    """Built-model path -> traced-model path: the two agree from the layer stack's parent down (a VL
    model's `model.language_model.layers` is its traced decoder's `model.layers`)."""
    if not stack:
        return lambda path: path
    classes = [type(m).__name__ for m in layers]
    name = stack.rpartition(".")[2]
    there = next((p for p, m in built_model.named_modules() if p.rpartition(".")[2] == name
                  and [type(c).__name__ for c in m.children()] == classes), None)
    if there is None or there == stack:
        return lambda path: path
    built_root, traced_root = there[:-len(name)], stack[:-len(name)]

    def to_traced(path: str) -> str:
        if path + "." == built_root:  # the decoder itself
            return traced_root[:-1]
        return traced_root + path[len(built_root):] if path.startswith(built_root) else path
    return to_traced


def portable(result: ModelResult) -> ModelResult:
    """The result without the template drafts' validation hooks (closures over the model), so it can be
    sent from a worker process; nothing written depends on them."""
    for draft in result.drafts:
        draft.check = None
    return result


def collect(results: list[ModelResult]) -> dict[str, emit.Problem]:
    return emit.merge([(r.config, r.drafts) for r in results])
