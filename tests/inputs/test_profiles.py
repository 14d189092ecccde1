"""Input profiles (solbench/inputs/profiles.py): structured trials give rows and columns of different
scales and a few outliers to plain random floats only, deterministically per (seed, profile)."""

from __future__ import annotations

import pytest
import torch

from solbench.inputs import make_inputs, profiles
from solbench.inputs.profiles import structured_tensor, trial_profile
from tests.inputs.inputs_builders import build_definition, build_workload

AXES = {"n": {"type": "var"}, "h": {"type": "const", "value": 512}}
INPUTS = {
    "x": {"shape": ["n", "h"], "dtype": "bfloat16"},
    "y": {"shape": ["n", "h"], "dtype": "float32"},
    "norm_weight": {"shape": ["h"], "dtype": "bfloat16"},
    "attention_mask": {"shape": ["n", "h"], "dtype": "float32", "description": "binary mask"},
    "probs": {"shape": ["n", "h"], "dtype": "float32"},
    "variance": {"shape": ["n"], "dtype": "float32"},
    "token_ids": {"shape": ["n"], "dtype": "int64"},
    "flags": {"shape": ["n", "h"], "dtype": "bool"},
    "q8": {"shape": ["n", "h"], "dtype": "float8_e4m3fn"},
    "eps": {"shape": None, "dtype": "float32"},
}


def make(profile: str, seed: int = 7, n: int = 256, device: str = "cpu"):
    definition = build_definition(INPUTS, axes=AXES)
    workload = build_workload({"eps": {"type": "scalar", "value": 1e-6}}, {"n": n})
    values = make_inputs(definition, workload, definition.resolve_axes(workload.axes), seed=seed, device=device,
                         profile=profile)
    return dict(zip(INPUTS, values))


def test_trial_profiles():
    assert [trial_profile(t, 3) for t in range(3)] == ["standard", "structured", "structured"]
    assert trial_profile(0, 1) == "structured"  # a single trial is the structured one
    with pytest.raises(ValueError, match="profile"):
        make("adversarial")


def test_standard_is_the_default_and_unchanged():
    definition = build_definition(INPUTS, axes=AXES)
    workload = build_workload({"eps": {"type": "scalar", "value": 1e-6}}, {"n": 64})
    plain = make_inputs(definition, workload, definition.resolve_axes(workload.axes), seed=7, device="cpu")
    standard = make("standard", n=64)
    assert all(torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b for a, b in zip(plain, standard.values()))


def test_same_seed_and_profile_regenerate_the_same_inputs_and_profiles_never_share_values():
    a, b, standard = make("structured"), make("structured"), make("standard")
    for name, value in a.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value.view(torch.uint8) if value.dtype == torch.float8_e4m3fn else value,
                               b[name].view(torch.uint8) if value.dtype == torch.float8_e4m3fn else b[name]), name
    for name in ("x", "y", "norm_weight", "probs", "token_ids"):  # heuristic inputs too: another seed
        assert not torch.equal(a[name], standard[name]), name


def row_rms(t: torch.Tensor) -> torch.Tensor:
    return t.float().pow(2).mean(-1).sqrt()


def test_structured_floats_have_rows_and_columns_of_different_scales_and_outliers():
    s, plain = make("structured", n=1024), make("standard", n=1024)
    for name in ("x", "y"):
        rms = row_rms(s[name])
        assert rms.max() / rms.min() > 5, "rows must not share one scale"
        assert row_rms(plain[name]).max() / row_rms(plain[name]).min() < 1.5
        columns = s[name].float().pow(2).mean(0).sqrt()
        assert columns.max() / columns.min() > 2
        outliers = (s[name].float().abs() > 6 * rms[:, None]).sum()
        assert 0 < outliers < s[name].numel() / 100
        assert s[name].float().abs().max() < 16, "magnitudes bounded like a normal draw's tails"
    assert s["x"].dtype == torch.bfloat16 and s["y"].dtype == torch.float32
    q8 = s["q8"].float()
    assert q8.isfinite().all() and row_rms(q8).max() / row_rms(q8).min() > 5


def test_heuristic_inputs_keep_their_meaning_under_structure():
    s = make("structured", n=512)
    assert ((s["norm_weight"].float() - 1).abs() < 1.5).all() and not (s["norm_weight"] == 1).all()
    assert set(s["attention_mask"].unique().tolist()) <= {0.0, 1.0}
    assert torch.allclose(s["probs"].sum(-1), torch.ones(512), atol=1e-5) and (s["probs"] >= 0).all()
    assert (s["variance"] > 0).all()
    assert (s["token_ids"] >= 0).all() and s["flags"].dtype == torch.bool
    assert s["eps"] == 1e-6


def test_typical_fp16_and_bf16_operations_on_structured_inputs_stay_finite():
    g = torch.Generator().manual_seed(3)
    for dtype in ("float16", "bfloat16"):
        a = structured_tensor((64, 16384), dtype, g, torch.device("cpu"))
        b = structured_tensor((16384, 64), dtype, g, torch.device("cpu"))
        product = (a.float() @ b.float()).to(a.dtype)  # K = 16384, both operands structured
        assert product.isfinite().all() and product.float().abs().max() < 6e4
        scores = structured_tensor((8, 128, 128), dtype, g, torch.device("cpu"))
        attention = torch.softmax((scores.float() @ scores.float().transpose(-1, -2)) / 128 ** 0.5, -1)
        assert attention.isfinite().all()
        squares = structured_tensor((32, 8192), dtype, g, torch.device("cpu")).float().pow(2).mean(-1)
        assert squares.to(a.dtype).isfinite().all()


def test_structured_leaves_shapes_it_cannot_structure_alone():
    assert not profiles.applies("float32", ())
    assert not profiles.applies("int32", (4, 4)) and not profiles.applies("float4_e2m1fn_x2", (4, 4))
    assert not profiles.applies("float32", (4, 0))
    one_d = structured_tensor((4096,), "float32", torch.Generator().manual_seed(1), torch.device("cpu"))
    assert one_d.shape == (4096,) and one_d.isfinite().all()


@pytest.mark.gpu
def test_structured_inputs_are_deterministic_on_the_gpu():
    a, b = make("structured", device="cuda"), make("structured", device="cuda")
    assert torch.equal(a["x"], b["x"]) and torch.equal(a["y"], b["y"])
    assert row_rms(a["x"]).max() / row_rms(a["x"]).min() > 5


def test_outlier_positions_are_independent_draws_with_the_asked_probability():
    """The outliers' positions come from geometric gaps: every position (the first and last included)
    is chosen with probability p, independently, and the count follows Binomial(n, p)."""
    from solbench.inputs.profiles import bernoulli_positions

    hits = torch.zeros(64)
    pairs = 0
    for seed in range(2000):
        found = bernoulli_positions(64, 0.25, torch.Generator().manual_seed(seed), torch.device("cpu"))
        assert found.dtype == torch.int64 and bool((found[1:] > found[:-1]).all())
        assert found.numel() == 0 or (0 <= int(found[0]) and int(found[-1]) < 64)
        hits[found] += 1
        pairs += int(bool((found == 10).any()) and bool((found == 11).any()))
    share = hits / 2000
    assert float(share.min()) > 0.21 and float(share.max()) < 0.29  # 0.25 +- 4 standard errors
    assert 0.04 < pairs / 2000 < 0.085  # neighbours independent: 0.25 ** 2
    counts = [bernoulli_positions(10**6, 1 / 512, torch.Generator().manual_seed(s), torch.device("cpu")).numel()
              for s in range(5)]
    assert all(abs(c - 10**6 / 512) < 5 * (10**6 / 512) ** 0.5 for c in counts)
