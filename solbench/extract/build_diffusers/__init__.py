"""Diffusion models (diffusers) built on the meta device, each with its model-level call recipe: the
`BuiltModel`s the generic capture consumes.

A models.json entry names its components, e.g. {"transformer": {"class": "FluxTransformer2DModel",
"config": {...}}, "vae": {"class": "AutoencoderKL", "config": {...}}}. Each component is built without
weights and called the way its pipeline calls it: transformers and UNets on latents, text states and a
timestep; VAEs as two models, `decode` (latents to pixels) and `encode` (pixels to the latent
distribution's parameters). Text encoders are transformers models and are left to the transformers builder.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from solbench.extract.build_diffusers.calls import ComponentCall
from solbench.extract.build_diffusers.dit import (
    hunyuan_image_recipe,
    qwen_image_recipe,
    sana_recipe,
    sd3_recipe,
    wan_recipe,
)
from solbench.extract.build_diffusers.flux import fibo_recipe, flux2_recipe, flux_recipe
from solbench.extract.build_diffusers.meta_module import (
    DiffusersBuildError,
    build_on_meta,
    tensor_cache_clearers,
)
from solbench.extract.build_diffusers.unet import unet_recipe
from solbench.extract.build_diffusers.vae import VAE_RECIPES
from solbench.extract.built import BuiltModel, CallMaker

Recipe = Callable[[nn.Module, str], list[ComponentCall]]

RECIPES: dict[str, Recipe] = {
    "FluxTransformer2DModel": flux_recipe,
    "Flux2Transformer2DModel": flux2_recipe,
    "BriaFiboTransformer2DModel": fibo_recipe,
    "QwenImageTransformer2DModel": qwen_image_recipe,
    "SD3Transformer2DModel": sd3_recipe,
    "SanaTransformer2DModel": sana_recipe,
    "HunyuanImageTransformer2DModel": hunyuan_image_recipe,
    "WanTransformer3DModel": wan_recipe,
    "UNet2DConditionModel": unet_recipe,
    **VAE_RECIPES,
}

__all__ = ["RECIPES", "DiffusersBuildError", "build_component", "build_diffusers", "diffusers_versions"]


def diffusers_versions() -> dict[str, str]:
    """The library versions that decide the captured graphs, recorded in every problem."""
    import diffusers  # deferred: an optional dependency, imported only once a diffusion model is built

    return {"diffusers": diffusers.__version__, "torch": torch.__version__.split("+")[0]}


def _is_transformers_component(component: dict[str, Any]) -> bool:
    """A text encoder (CLIP, T5, Qwen2.5-VL, ...): marked `"library": "transformers"`, or a class that
    transformers defines and diffusers does not."""
    library = component.get("library")
    if library is not None:
        return library == "transformers"
    name = component["class"]
    if name in RECIPES:
        return False
    import diffusers  # deferred: optional dependency; it imports transformers itself
    import transformers  # deferred: as above

    return not hasattr(diffusers, name) and hasattr(transformers, name)


def _fresh_caches(make_call: CallMaker, clearers: list[Callable[[], None]]) -> CallMaker:
    """`make_call` that first empties the module's tensor caches, so each call computes its own tables."""
    if not clearers:
        return make_call

    def fresh(axes: dict[str, int], dtype: torch.dtype):
        for clear in clearers:
            clear()
        return make_call(axes, dtype)

    return fresh


def build_component(model_id: str, name: str, class_name: str, config: dict[str, Any],
                    dtype: torch.dtype) -> list[BuiltModel]:
    """One component (`name`, e.g. "transformer" or "vae") as one BuiltModel per path through it."""
    recipe = RECIPES.get(class_name)
    if recipe is None:
        raise DiffusersBuildError(f"{model_id} {name}: no call recipe for diffusers class {class_name!r} "
                                  f"(known: {', '.join(sorted(RECIPES))})")
    module = build_on_meta(class_name, config, dtype)
    versions = diffusers_versions()
    clearers = tensor_cache_clearers(module)
    built = []
    for call in recipe(module, model_id):
        label = f"{name}.{call.path}" if call.path else name
        built.append(BuiltModel(model_id=f"{model_id}:{label}", module=call.module, library="diffusers",
                                make_call=_fresh_caches(call.make_call, clearers), capture_axes=call.capture_axes,
                                workload_axes=call.workload_axes, versions=versions, family="diffusion"))
    return built


def build_diffusers(model_id: str, entry: dict[str, Any], dtype: torch.dtype) -> list[BuiltModel]:
    """Every component of a models.json diffusers entry worth extracting, in the entry's order. Components
    whose class is a transformers model (text encoders) are skipped: they are built from their own entry."""
    components = entry.get("components")
    if not isinstance(components, dict) or not components:
        raise DiffusersBuildError(f"{model_id}: a diffusers entry needs a non-empty 'components' object")
    built = []
    repeats = repeated_components(components)
    for name, component in components.items():
        if not isinstance(component, dict) or not isinstance(component.get("class"), str):
            raise DiffusersBuildError(f"{model_id} {name}: a component needs a 'class' name and a 'config'")
        if _is_transformers_component(component) or name in repeats:
            continue
        built += build_component(model_id, name, component["class"], component.get("config") or {}, dtype)
    return built


def repeated_components(components: dict[str, Any]) -> dict[str, str]:
    """Components with the class and config of an earlier one (Wan2.2 A14B's two experts), each mapped to
    that one: built from the same facts, they give the same problems, so only the first is extracted."""
    first: dict[str, str] = {}
    repeats = {}
    for name, component in components.items():
        if not isinstance(component, dict):
            continue
        key = json.dumps([component.get("class"), component.get("config") or {}], sort_keys=True, default=str)
        if key in first:
            repeats[name] = first[key]
        else:
            first[key] = name
    return repeats
