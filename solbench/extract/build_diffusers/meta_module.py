"""A diffusers component (class name + config dict) instantiated on the meta device: no weights, no network.

The config is checked against the class's constructor first: diffusers' own `from_config` drops keys it does
not know with a warning, so a config in another format (for example the original sgm keys of SDXL) would
silently build the class defaults, a different model.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from solbench.extract import known

# keys diffusers writes into every config.json; they are not constructor arguments
_BOOKKEEPING_KEYS = frozenset({"_class_name", "_diffusers_version", "_name_or_path", "_use_default_values",
                               # a pipeline-side precision flag that VAE config.json files carry even for
                               # classes whose constructor does not take it (AutoencoderKLFlux2)
                               "force_upcast"})


class DiffusersBuildError(ValueError):
    """A component that cannot be built: unknown class, unknown config key, or a constructor that refuses."""


def diffusers_class(class_name: str) -> type[nn.Module]:
    """The diffusers model class named `class_name` (imported lazily: diffusers is an optional dependency)."""
    try:
        import diffusers  # deferred: only diffusion models need it, and importing it takes seconds
    except ImportError as error:
        raise DiffusersBuildError(f"{class_name} needs diffusers: pip install 'solbench[extract]' ({error})") from None
    cls = getattr(diffusers, class_name, None) if class_name.isidentifier() else None
    if not isinstance(cls, type) or not issubclass(cls, nn.Module):
        raise DiffusersBuildError(f"diffusers {diffusers.__version__} has no model class {class_name!r}")
    return cls


def checked_config(cls: type[nn.Module], config: dict[str, Any]) -> dict[str, Any]:
    """`config` without bookkeeping keys; refuses keys the constructor does not take."""
    if not isinstance(config, dict):
        raise DiffusersBuildError(f"{cls.__name__} config must be a JSON object, not {type(config).__name__}")
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self"}
    kwargs = {key: value for key, value in config.items() if key in accepted or key not in _BOOKKEEPING_KEYS}
    unknown = sorted(set(kwargs) - accepted)
    if unknown:
        raise DiffusersBuildError(f"{cls.__name__} does not take config key(s) {', '.join(unknown)}")
    return kwargs


def _keep_in_fp32(module: nn.Module) -> None:
    """Put back in fp32 the parameters diffusers keeps in fp32 when it loads a checkpoint in a lower dtype
    (`_keep_in_fp32_modules`, e.g. Wan's time embedder): the captured graph then has the casts real runs have."""
    names = set(getattr(module, "_keep_in_fp32_modules", None) or ())
    for name, submodule in module.named_modules():
        if names & set(name.split(".")):
            submodule.to(torch.float32)


def build_on_meta(class_name: str, config: dict[str, Any], dtype: torch.dtype) -> nn.Module:
    """The component with its parameters on the meta device in `dtype`, in eval mode."""
    cls = diffusers_class(class_name)
    kwargs = checked_config(cls, config)
    quiet = logging.getLogger("diffusers")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # its note on `.to(dtype)` vs `torch_dtype=` is about checkpoints we do not load
    try:
        with torch.device("meta"):
            module = known.build(lambda: cls(**kwargs))
        module.to(dtype)
    except (TypeError, ValueError, KeyError, IndexError, AssertionError, AttributeError) as error:
        raise DiffusersBuildError(f"{class_name} refused its config: {type(error).__name__}: {error}") from None
    finally:
        quiet.setLevel(level)
    if dtype != torch.float32:
        _keep_in_fp32(module)
    return module.eval()


def tensor_cache_clearers(module: nn.Module) -> list[Callable[[], None]]:
    """The `cache_clear` of every functools.lru_cache behind a method of the module's classes.

    diffusers caches rope tables per grid size (`lru_cache_unless_export`, e.g. Qwen-Image's
    `_compute_video_freqs`); outside torch.export a table made under one fake or meta mode would be handed to
    the next call under another mode. Recipes clear them before every call."""
    clearers = {}
    for cls in {type(submodule) for submodule in module.modules()}:
        for attribute in vars(cls).values():
            for cell in getattr(attribute, "__closure__", None) or ():
                try:
                    contents = cell.cell_contents
                except ValueError:  # an empty cell
                    continue
                if callable(getattr(contents, "cache_clear", None)):
                    clearers[id(contents)] = contents.cache_clear
    return list(clearers.values())
