"""Diffusion components built on meta from a class name and a config, and called by their recipes under fake
tensors: every recipe at two capture sizes of each axis with a tiny config, the real FLUX.1-dev transformer
on meta, and (slow) every official diffusers component of models.json with its real config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("diffusers")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

from solbench.extract.build_diffusers import RECIPES, DiffusersBuildError, build_component, build_diffusers  # noqa: E402

MODELS_JSON = Path(__file__).resolve().parents[2] / "solbench" / "extract" / "data" / "models.json"

# class -> (tiny config, expected output shape from the axes of one call)
TINY = {
    "FluxTransformer2DModel": (
        dict(in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16, num_attention_heads=2,
             joint_attention_dim=32, pooled_projection_dim=24, axes_dims_rope=[4, 6, 6], guidance_embeds=True),
        lambda a: (a["batch_size"], a["latent_height"] * a["latent_width"] // 4, 16)),
    "Flux2Transformer2DModel": (
        dict(in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16, num_attention_heads=2,
             joint_attention_dim=32, timestep_guidance_channels=32, axes_dims_rope=[4, 4, 4, 4]),
        lambda a: (a["batch_size"], a["latent_height"] * a["latent_width"] // 4, 16)),
    "BriaFiboTransformer2DModel": (
        dict(in_channels=16, num_layers=1, num_single_layers=1, attention_head_dim=16, num_attention_heads=2,
             joint_attention_dim=32, text_encoder_dim=24, axes_dims_rope=[4, 6, 6]),
        lambda a: (a["batch_size"], a["latent_height"] * a["latent_width"] // 4, 16)),
    "QwenImageTransformer2DModel": (
        dict(in_channels=16, out_channels=4, num_layers=1, attention_head_dim=16, num_attention_heads=2,
             joint_attention_dim=32, axes_dims_rope=[4, 6, 6]),
        lambda a: (a["batch_size"], a["latent_height"] * a["latent_width"] // 4, 16)),
    "SD3Transformer2DModel": (
        dict(sample_size=32, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=16, num_attention_heads=2,
             joint_attention_dim=32, caption_projection_dim=32, pooled_projection_dim=24, out_channels=4,
             pos_embed_max_size=32, dual_attention_layers=[0], qk_norm="rms_norm"),
        lambda a: (a["batch_size"], 4, a["latent_height"], a["latent_width"])),
    "SanaTransformer2DModel": (
        dict(in_channels=8, out_channels=8, num_attention_heads=2, attention_head_dim=16, num_layers=1,
             num_cross_attention_heads=2, cross_attention_head_dim=16, cross_attention_dim=32, caption_channels=24,
             sample_size=8, patch_size=1, guidance_embeds=True),
        lambda a: (a["batch_size"], 8, a["latent_height"], a["latent_width"])),
    "HunyuanImageTransformer2DModel": (
        dict(in_channels=8, out_channels=8, num_attention_heads=2, attention_head_dim=16, num_layers=1,
             num_single_layers=1, num_refiner_layers=1, patch_size=[1, 1], text_embed_dim=24, rope_axes_dim=[8, 8]),
        lambda a: (a["batch_size"], 8, a["latent_height"], a["latent_width"])),
    "WanTransformer3DModel": (
        dict(patch_size=[1, 2, 2], num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=4,
             text_dim=24, freq_dim=32, ffn_dim=64, num_layers=1, qk_norm="rms_norm_across_heads"),
        lambda a: (a["batch_size"], 4, a["latent_frames"], a["latent_height"], a["latent_width"])),
    "UNet2DConditionModel": (  # SDXL-style: text_time conditioning with 6 time ids
        dict(sample_size=16, block_out_channels=[32, 64], layers_per_block=1,
             down_block_types=["CrossAttnDownBlock2D", "DownBlock2D"], up_block_types=["UpBlock2D", "CrossAttnUpBlock2D"],
             cross_attention_dim=32, attention_head_dim=8, norm_num_groups=8, addition_embed_type="text_time",
             addition_time_embed_dim=8, projection_class_embeddings_input_dim=1280 + 6 * 8),
        lambda a: (a["batch_size"], 4, a["latent_height"], a["latent_width"])),
}
_KL = dict(block_out_channels=[8, 16], down_block_types=["DownEncoderBlock2D"] * 2,
           up_block_types=["UpDecoderBlock2D"] * 2, latent_channels=4, norm_num_groups=4, layers_per_block=1,
           sample_size=64)
_WAN_VAE = dict(base_dim=8, z_dim=4, dim_mult=[1, 2], num_res_blocks=1, temperal_downsample=[False],
                latents_mean=[0.0] * 4, latents_std=[1.0] * 4)
# VAE class -> (tiny config, spatial factor, frame axis: None (2D), "one" (a single frame), "video")
TINY_VAE = {
    "AutoencoderKL": (_KL, 2, None),
    "AutoencoderKLFlux2": (_KL, 2, None),
    "AutoencoderDC": (dict(latent_channels=4, attention_head_dim=4, encoder_block_types=["ResBlock", "EfficientViTBlock"],
                           decoder_block_types=["ResBlock", "EfficientViTBlock"], encoder_block_out_channels=[8, 16],
                           decoder_block_out_channels=[8, 16], encoder_layers_per_block=[1, 1],
                           decoder_layers_per_block=[1, 1], encoder_qkv_multiscales=[[], [5]],
                           decoder_qkv_multiscales=[[], [5]]), 2, None),
    "AutoencoderKLHunyuanImage": (dict(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=[32, 64],
                                       layers_per_block=1, spatial_compression_ratio=2, sample_size=32), 2, None),
    "AutoencoderKLQwenImage": (_WAN_VAE, 2, "one"),
    "AutoencoderKLWan": (dict(_WAN_VAE, dim_mult=[1, 1, 1, 1], temperal_downsample=[False, True, True]), 8, "video"),
}
FAST = {"FluxTransformer2DModel", "WanTransformer3DModel", "UNet2DConditionModel", "AutoencoderKL"}  # one per file


def _marks(name: str):
    return () if name in FAST else (pytest.mark.slow,)


def capture_points(capture_axes: dict[str, tuple[int, ...]]):
    """Every axis at its first capture size, then every axis at its second (two calls keep the test cheap)."""
    return [{axis: sizes[i] for axis, sizes in capture_axes.items()} for i in (0, 1)]


def fake_forward(built, axes: dict[str, int], dtype=torch.bfloat16) -> torch.Tensor:
    with torch.no_grad(), torch.device("meta"), FakeTensorMode(allow_non_fake_inputs=True):
        args, kwargs = built.make_call(axes, dtype)
        out = built.module(*args, **kwargs)
    return out[0] if isinstance(out, tuple) else out


def recorded_forward(built, axes: dict[str, int], dtype=torch.bfloat16) -> None:
    """A forward as the recording runs it (`capture.record_calls`): on meta tensors, else on fake ones."""
    try:
        with torch.no_grad(), torch.device("meta"):
            args, kwargs = built.make_call(axes, dtype)
            built.module(*args, **kwargs)
    except Exception:  # noqa: BLE001 - what the recording falls back to, whose failure the test reports
        fake_forward(built, axes, dtype)


def _check_capture_axes(built) -> None:
    for axis, sizes in built.capture_axes.items():
        assert len(sizes) >= 2 and min(sizes) >= 2, (axis, sizes)
        assert axis in built.workload_axes, axis


@pytest.mark.parametrize("class_name", [pytest.param(n, marks=_marks(n)) for n in TINY])
def test_tiny_component_runs_at_each_capture_size(class_name):
    config, expected = TINY[class_name]
    (built,) = build_component("tiny/model", "transformer", class_name, config, torch.bfloat16)
    assert built.model_id == "tiny/model:transformer" and built.library == "diffusers"
    assert built.family == "diffusion" and built.versions["diffusers"]
    assert all(p.device.type == "meta" for p in built.module.parameters())
    _check_capture_axes(built)
    shapes = []
    for axes in capture_points(built.capture_axes):
        out = fake_forward(built, axes)
        assert tuple(out.shape) == expected(axes), axes
        shapes.append(tuple(out.shape))
    assert shapes[0] != shapes[1]  # the axes move the output


def _vae_shapes(axes, latent_channels, factor, frames):
    batch = axes["batch_size"]
    if "latent_height" in axes:  # decode
        t = {None: (), "one": (1,), "video": (1 + 4 * (axes.get("latent_frames", 1) - 1),)}[frames]
        return batch, 3, *t, axes["latent_height"] * factor, axes["latent_width"] * factor
    t = {None: (), "one": (1,), "video": (1 + (axes.get("video_frames", 1) - 1) // 4,)}[frames]
    return batch, latent_channels, *t, axes["image_height"] // factor, axes["image_width"] // factor


@pytest.mark.parametrize("class_name", [pytest.param(n, marks=_marks(n)) for n in TINY_VAE])
def test_tiny_vae_decodes_and_encodes(class_name):
    config, factor, frames = TINY_VAE[class_name]
    built = build_component("tiny/model", "vae", class_name, config, torch.float32)
    assert [b.model_id for b in built] == ["tiny/model:vae.decode", "tiny/model:vae.encode"]
    for one in built:
        _check_capture_axes(one)
        for axes in capture_points(one.capture_axes):
            out = fake_forward(one, axes, torch.float32)
            assert tuple(out.shape) == _vae_shapes(axes, 4, factor, frames), (one.model_id, axes)


def test_tiny_recipe_runs_on_real_cpu_tensors():
    """The same call recipe with real tensors (what validation will do): finite output of the right shape."""
    from diffusers import FluxTransformer2DModel  # deferred: an optional dependency, guarded above

    config, expected = TINY["FluxTransformer2DModel"]
    torch.manual_seed(0)
    (call,) = RECIPES["FluxTransformer2DModel"](FluxTransformer2DModel(**config).eval(), "tiny/model")
    axes = {axis: sizes[0] for axis, sizes in call.capture_axes.items()}
    args, kwargs = call.make_call(axes, torch.float32)
    with torch.no_grad():
        out = call.module(*args, **kwargs)[0]
    assert out.shape == expected(axes) and torch.isfinite(out).all()


# FLUX.1-dev's transformer: diffusers' FluxTransformer2DModel defaults (the FLUX.1 12B shape) with guidance
FLUX1_DEV = {"library": "diffusers", "kind": "diffusion", "components": {
    "transformer": {"class": "FluxTransformer2DModel", "config": {
        "patch_size": 1, "in_channels": 64, "num_layers": 19, "num_single_layers": 38, "attention_head_dim": 128,
        "num_attention_heads": 24, "joint_attention_dim": 4096, "pooled_projection_dim": 768,
        "axes_dims_rope": [16, 56, 56], "guidance_embeds": True}},
    "text_encoder_2": {"class": "T5EncoderModel", "library": "transformers", "config": {}}}}


def test_real_flux_transformer_builds_on_meta():
    built = build_diffusers("black-forest-labs/FLUX.1-dev", FLUX1_DEV, torch.bfloat16)
    assert [b.model_id for b in built] == ["black-forest-labs/FLUX.1-dev:transformer"]  # text encoder left out
    params = list(built[0].module.parameters())
    assert 11.8e9 < sum(p.numel() for p in params) < 12.0e9
    assert {p.device.type for p in params} == {"meta"} and {p.dtype for p in params} == {torch.bfloat16}
    assert built[0].workload_axes["latent_height"] == (64, 96, 128)  # 512, 768, 1024 px
    assert not built[0].module.training


@pytest.mark.parametrize("component, message", [
    ({"class": "NoSuchModel2D", "config": {}}, "no call recipe for diffusers class 'NoSuchModel2D'"),
    ({"class": "UNet2DConditionModel", "config": {"model_channels": 320}}, "does not take config key(s) model_channels"),
    ({"class": "AutoencoderKL", "config": {"block_out_channels": [8], "norm_num_groups": 3}}, "refused its config"),
    ({"config": {}}, "needs a 'class' name"),
])
def test_bad_component_is_one_clear_error(component, message):
    with pytest.raises(DiffusersBuildError) as error:
        build_diffusers("some/model", {"components": {"transformer": component}}, torch.float32)
    assert message in str(error.value) and "\n" not in str(error.value)


def _official_diffusers_entries() -> list[tuple[str, dict]]:
    models = json.loads(MODELS_JSON.read_text()).get("models", {})
    return sorted((k, v) for k, v in models.items() if isinstance(v, dict) and v.get("library") == "diffusers")


@pytest.mark.slow
def test_every_shipped_diffusers_component_runs_as_the_recording_runs_it():
    entries = _official_diffusers_entries()
    if not entries:
        pytest.skip("models.json ships no diffusers entries yet")
    failures = []
    for model_id, entry in entries:
        for built in build_diffusers(model_id, entry, torch.bfloat16):
            axes = {axis: sizes[0] for axis, sizes in built.capture_axes.items()}
            try:
                recorded_forward(built, axes)
            except Exception as error:  # collect every failing component, not just the first
                failures.append(f"{built.model_id}: {type(error).__name__}: {error}")
    assert not failures, "\n".join(failures)


def test_rope_tables_cached_under_one_mode_are_not_reused_under_another():
    """Qwen-Image caches its rope tables per grid (an lru_cache): a table made under fake tensors must not
    reach a later call on meta tensors with the same grid (it fails in view_as_complex when it does)."""
    (built,) = build_component("Qwen/Qwen-Image-Edit", "transformer", "QwenImageTransformer2DModel",
                               TINY["QwenImageTransformer2DModel"][0], torch.bfloat16)
    axes = {axis: sizes[0] for axis, sizes in built.capture_axes.items()}
    fake_forward(built, axes)
    with torch.no_grad(), torch.device("meta"):
        args, kwargs = built.make_call(axes, torch.bfloat16)
        out = built.module(*args, **kwargs)[0]
    assert out.shape == (axes["batch_size"], axes["latent_height"] * axes["latent_width"] // 4 * 2, 16)  # Edit: two grids


def test_tiny_flux_blocks_validate_bit_exact_at_the_small_sizes():
    """Traced at the larger capture point, every block of a FLUX transformer is compared bit for bit with its
    module at the two small ones (batch 2 and 3, 2x3 and 3x2 patches), in float32 and bfloat16."""
    from solbench.extract import blocks

    (built,) = build_component("tiny/model", "transformer", "FluxTransformer2DModel",
                               TINY["FluxTransformer2DModel"][0], torch.bfloat16)
    result = blocks.extract_blocks(built, torch.bfloat16)
    assert len(result.drafts) >= 15 and len(result.validations) == len(result.drafts)
    assert all(v.passed and v.exact == {"float32": True, "bfloat16": True} for v in result.validations)
    assert all(not v.message for v in result.validations)  # two sizes other than the traced one, every block
    assert not [n for n in result.not_emitted if "valid" in n.reason or "captured" in n.reason]


def test_a_vae_mid_block_is_one_block_and_validates_bit_exact():
    """The decoder's bottleneck (resnet, attention, resnet) is a problem of its own, as the official dataset
    has it, beside each resnet and the attention; the up blocks and the decoder stay stacks of layers."""
    from solbench.extract import blocks

    decode = build_component("tiny/model", "vae", "AutoencoderKL", _KL, torch.bfloat16)[0]
    result = blocks.extract_blocks(decode, torch.bfloat16)
    kinds = {d.op_type: v for d, v in zip(result.drafts, result.validations)}
    mid = kinds.get("u_net_mid_block2d")
    assert mid is not None, sorted(kinds)
    assert mid.passed and mid.exact == {"float32": True, "bfloat16": True}, mid.message
    assert {"resnet_block2d", "attention"} <= set(kinds)
    stacks = {n.path for n in result.not_emitted if "stack of layers" in n.reason}
    assert {"vae.decoder", "vae.decoder.up_blocks.0"} <= stacks, stacks


def test_a_component_repeating_an_earlier_ones_class_and_config_is_built_once():
    """Wan2.2 A14B's two experts share class and config: the second gives the first's problems, so it is not
    built (a third of that model's extraction), and the pipeline says whose problems they are."""
    from solbench.extract import configs, pipeline
    from solbench.extract.build_diffusers import repeated_components

    tiny, _ = TINY["WanTransformer3DModel"]
    wider = dict(tiny, ffn_dim=96)
    components = {"transformer": {"class": "WanTransformer3DModel", "config": tiny},
                  "transformer_2": {"class": "WanTransformer3DModel", "config": dict(reversed(list(tiny.items())))},
                  "transformer_3": {"class": "WanTransformer3DModel", "config": wider}}
    assert repeated_components(components) == {"transformer_2": "transformer"}  # key order does not matter
    built = build_diffusers("tiny/wan", {"components": components}, torch.float32)
    assert [b.model_id for b in built] == ["tiny/wan:transformer", "tiny/wan:transformer_3"]

    def extract(parts: dict) -> pipeline.ModelResult:
        config = configs.ModelConfig("tiny/wan", {}, "test", "tiny", "diffusion", "diffusers", parts)
        return pipeline._extract_diffusers(config, "float32", False, lambda step: None, 0.0)

    both = extract({k: components[k] for k in ("transformer", "transformer_2")})
    alone = extract({"transformer": components["transformer"]})
    assert "transformer_2: the same class and config as transformer: its problems are transformer's" in both.skipped
    assert both.drafts and [d.name for d in both.drafts] == [d.name for d in alone.drafts]
