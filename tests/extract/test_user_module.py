"""`--module package.module:Class`: any importable nn.Module built on meta as a BuiltModel."""

from __future__ import annotations

import json

import pytest
import torch

from solbench.extract import user_module
from solbench.extract.built import BuiltModel
from solbench.spec.errors import SpecError

TINY = "tests.extract.tiny_modules"


def test_a_plain_module_builds_on_meta_with_its_call(tmp_path):
    path = tmp_path / "block.json"
    path.write_text(json.dumps({"hidden": 64, "inner": 96}))
    config = user_module.read_config_file(path) | user_module.parse_config_kw(["eps=1e-5"])
    built = user_module.build_user_module(f"{TINY}:GatedBlock", config,
                                          ["x=2,seq:16|24|40,64", "scale=1:float32"], model_id="me/block")
    assert isinstance(built, BuiltModel) and built.model_id == "me/block" and built.library == "module"
    assert all(p.device.type == "meta" for p in built.module.parameters())
    assert not built.module.training and built.module.norm.eps == 1e-5
    assert built.capture_axes == {"seq": (16, 24, 40)} and built.workload_axes == {"seq": (16, 24, 40)}
    with torch.device("meta"):  # inputs go to the current default device, as the module's capture wants
        args, kwargs = built.make_call({"seq": 24}, torch.bfloat16)
        out = built.module(*args, **kwargs)
    assert args == () and kwargs["x"].shape == (2, 24, 64) and kwargs["x"].dtype == torch.bfloat16
    assert kwargs["x"].device.type == "meta"
    assert kwargs["scale"].dtype == torch.float32  # an explicit dtype is kept whatever the capture dtype
    assert out.shape == (2, 24, 64)


def test_integer_inputs_stay_below_their_bound():
    built = user_module.build_user_module(f"{TINY}:TokenMixer", {"vocab": 50, "hidden": 8},
                                          ["ids=2,seq:8|12|20:int64[50]"])
    _, kwargs = built.make_call({"seq": 12}, torch.float32)
    ids = kwargs["ids"]
    assert ids.dtype == torch.int64 and ids.shape == (2, 12) and int(ids.max()) < 50 and int(ids.min()) >= 0
    assert built.versions["torch"] == torch.__version__


@pytest.mark.parametrize("spec, message", [
    ("x", "NAME=DIM"), ("x=2,seq,64", "neither a size"), ("x=2,seq:16|24,64", "three or more"),
    ("x=2,seq:16|a|3,64", "integers"), ("x=2,64:complex7", "unknown dtype"), ("x=2,seq:1|2|3,64", "three or more"),
])
def test_bad_input_specs_are_one_clear_line(spec, message):
    with pytest.raises(SpecError, match=message) as info:
        user_module.parse_input(spec)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("target, message", [
    ("tests.extract.tiny_modules", "package.module:Class"), ("no_such_package_xyz.mod:Thing", "cannot import"),
    (f"{TINY}:Missing", "has no"), (f"{TINY}:NOT_A_MODULE", "not an nn.Module"),
])
def test_bad_targets_are_clear_errors(target, message):
    with pytest.raises(SpecError, match=message):
        user_module.build_user_module(target, {}, ["x=2,64"])


def test_wrong_constructor_arguments_and_missing_inputs_are_clear_errors(tmp_path):
    with pytest.raises(SpecError, match="cannot build it"):
        user_module.build_user_module(f"{TINY}:GatedBlock", {"width": 3}, ["x=2,64"])
    with pytest.raises(SpecError, match="--input"):
        user_module.build_user_module(f"{TINY}:GatedBlock", {"hidden": 8, "inner": 8}, [])
    bad = tmp_path / "c.json"
    bad.write_text("[1, 2]")
    with pytest.raises(SpecError, match="JSON object"):
        user_module.read_config_file(bad)
    with pytest.raises(SpecError, match="KEY=VALUE"):
        user_module.parse_config_kw(["=3"])


def test_cli_module_extracts_validated_problems(tmp_path):
    """--module through the generic capture: a validated problem written, its config the user's arguments."""
    out = tmp_path / "defs"
    assert _extract(["--module", f"{TINY}:GatedBlock", "--config-kw", "hidden=64", "inner=96",
                     "--input", "x=2,seq:16|24|40,64", "--input", "scale=1:float32", "--model", "me/gated",
                     "-o", str(out)]) == 0
    written = sorted((out / "problem_defs" / "hf").iterdir())
    assert written
    meta = json.loads((written[0] / "definition.json").read_text())
    assert meta["solbench"]["models"][0]["hf_id"] == "me/gated"


@pytest.mark.parametrize("backward", [False, True])
def test_cli_backward_flag_adds_validated_backward_problems(tmp_path, backward, capfd):
    """--backward: each generic block of a backward kind (an MLP here) also gets its backward problem,
    validated against autograd (the command exits 0 only if every one passed); without it, forward
    problems only."""
    out = tmp_path / "defs"
    assert _extract(["--module", f"{TINY}:GatedMLP", "--config-kw", "hidden=64", "inner=96",
                     "--input", "x=2,seq:16|24|40,64", "--input", "scale=1:float32", "-o", str(out)]
                    + (["--backward"] if backward else [])) == 0
    kinds = sorted(json.loads((d / "definition.json").read_text())["op_type"]
                   for d in (out / "problem_defs" / "hf").iterdir())
    forward = {"gated_mlp", "rms_norm"}  # the block, and its norm (both kinds with backward problems)
    assert set(kinds) == forward | ({f"{k}_backward" for k in forward} if backward else set()), kinds
    said = " ".join(capfd.readouterr().err.split())  # its Linear layers: one line, not a gap
    assert "left out by design" in said and "Linear x" in said and "skipped" not in said, said


def test_cli_encoders_with_a_module_is_a_clear_error(tmp_path, capsys):
    """--encoders looks for a hub model's towers; with --module it would be silently ignored: one line instead,
    nothing written."""
    out = tmp_path / "defs"
    assert _extract(["--module", f"{TINY}:GatedMLP", "--config-kw", "hidden=64", "inner=96",
                     "--input", "x=2,seq:16|24|40,64", "--encoders", "-o", str(out)]) == 2
    said = capsys.readouterr()
    assert "--encoders" in said.out + said.err and "Traceback" not in said.out + said.err
    assert not out.exists()


def test_backward_of_a_block_recorded_on_a_strided_view_is_bit_exact(tmp_path):
    """The MLP is recorded with a slice of its caller's tokens (not contiguous); its backward is traced on
    contiguous inputs, as its problem draws them and as it is checked: traced on the slice's strides, its first
    linear became `mm` and `add` (two bfloat16 roundings, not `addmm`'s one), and the bfloat16 gradients of
    the later weights were 1 ulp off autograd's (SAM-HQ's hypernetwork MLPs)."""
    out = tmp_path / "defs"
    assert _extract(["--module", f"{TINY}:SlicedTokens", "--config-kw", "hidden=32", "out=4",
                     "--input", "tokens=batch:4|2|3,1,5,32", "--backward", "-o", str(out)]) == 0
    kinds = sorted(json.loads((d / "definition.json").read_text())["op_type"]
                   for d in (out / "problem_defs" / "hf").iterdir())
    assert kinds == ["hypernetwork_mlp", "hypernetwork_mlp_backward"], kinds


def _extract(argv: list[str]) -> int:
    """`solbench extract` with `argv`, parsed and handled as the command does: its exit code."""
    import argparse

    from solbench.cli import extract as extract_cli

    parser = argparse.ArgumentParser()
    extract_cli.add_arguments(parser)
    return extract_cli.handle(parser.parse_args(argv))
