"""`solbench extract` on the shipped model list: reasons, families, and bad input that damages nothing."""

from __future__ import annotations

import argparse
import json

from solbench.cli import extract as extract_cli


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    extract_cli.add_arguments(parser)
    return parser.parse_args(argv)


def _error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


def test_list_shows_kinds_libraries_and_reasons(capsys):
    assert extract_cli.handle(_args(["--list"])) == 0
    err = capsys.readouterr().err
    ling = next(line for line in err.splitlines() if line.startswith("inclusionAI/Ling-1T"))
    assert "remote code" in ling and "BailingMoeV2" in ling
    flux = next(line for line in err.splitlines() if line.startswith("black-forest-labs/FLUX.1-dev"))
    assert "diffusion" in flux and "diffusers" in flux


def test_a_remote_code_model_exits_2_naming_its_reason(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert extract_cli.handle(_args(["--model", "hexgrad/Kokoro-82M"])) == 2
    err = capsys.readouterr().err
    assert len(_error_lines(err)) == 1 and "kokoro package" in err and "Traceback" not in err


def test_malformed_and_unknown_configs_exit_2_and_leave_written_problems_alone(tmp_path, capsys):
    out = tmp_path / "defs"
    kept = out / "problem_defs" / "hf" / "some_problem" / "definition.json"
    kept.parent.mkdir(parents=True)
    kept.write_text('{"name": "some_problem"}')
    common = ["--model", "me/odd", "-o", str(out), "--no-validate"]
    bad = tmp_path / "bad.json"
    for text, message in (("{not json", "not valid JSON"), ('{"hidden_size": 8}', "model_type"),
                          (json.dumps({"model_type": "no_such_arch", "hidden_size": 8}), "no_such_arch"),
                          (json.dumps({"model_type": "llama", "hidden_size": "wide"}), "me/odd")):
        bad.write_text(text)
        assert extract_cli.handle(_args([*common, "--config", str(bad)])) == 2, text
        err = capsys.readouterr().err
        assert len(_error_lines(err)) == 1 and message in err and "Traceback" not in err, err
    assert kept.read_text() == '{"name": "some_problem"}'
    assert sorted(p.name for p in (out / "problem_defs" / "hf").iterdir()) == ["some_problem"]
