"""The extract / pull command handlers: exit codes, messages, --check."""

from __future__ import annotations

import argparse
import json
import os
import pty
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from solbench.cli import extract as extract_cli
from tests.child_env import repo_env

ROOT = Path(__file__).resolve().parents[2]


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    extract_cli.add_arguments(parser)
    return parser.parse_args(argv)


def test_unknown_model_is_exit_2_with_help(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert extract_cli.handle(_args(["--model", "nobody/nothing-here"])) == 2
    err = capsys.readouterr().err
    assert "--config" in err and "Qwen/Qwen3-8B" in err and "Traceback" not in err


def test_nothing_to_do_is_exit_2(capsys):
    assert extract_cli.handle(_args([])) == 2
    assert extract_cli.handle(_args(["--all", "--config", "x.json"])) == 2


def test_list_names_the_shipped_models(capsys):
    assert extract_cli.handle(_args(["--list"])) == 0
    assert "deepseek-ai/DeepSeek-V3" in capsys.readouterr().err


def test_extract_writes_then_check_passes_then_detects_drift(tmp_path):
    out, refs = tmp_path / "defs", tmp_path / "refs"
    common = ["--model", "meta-llama/Llama-3.2-1B", "-o", str(out), "--references", str(refs)]
    assert extract_cli.handle(_args([*common, "--no-validate"])) == 0
    assert (out / "problem_defs" / "hf" / "swiglu_mlp_h2048_i8192" / "definition.json").is_file()
    assert (refs / "hf" / "swiglu_mlp_h2048_i8192.py").is_file()
    assert extract_cli.handle(_args([*common, "--check"])) == 0
    target = refs / "hf" / "swiglu_mlp_h2048_i8192.py"
    target.write_text(target.read_text() + "# edited\n")
    assert extract_cli.handle(_args([*common, "--check"])) == 1
    target.unlink()
    assert extract_cli.handle(_args([*common, "--check"])) == 1


def test_shipped_problems_match_the_extractor_for_a_sample():
    """`--check` on two models' problems (the full check runs every shipped model: `--check`)."""
    args = _args(["--check", "--model", "Qwen/Qwen3-0.6B", "--model", "openai/gpt-oss-20b",
                  "-o", str(ROOT)])
    assert extract_cli.handle(args) == 0


def test_progress_names_the_model_and_problem_on_a_terminal(tmp_path):
    """On a terminal the status line says which problem is being validated (a model takes seconds)."""
    env = repo_env(ROOT, HF_HUB_OFFLINE="1", COLUMNS="200", TERM="xterm")
    command = [sys.executable, "-m", "solbench", "extract", "--model", "Qwen/Qwen3-0.6B",
               "-o", str(tmp_path / "defs"), "--references", str(tmp_path / "refs")]
    leader, follower = pty.openpty()
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdin=follower, stdout=follower, stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the process has exited
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert process.wait(timeout=600) == 0
    screen = b"".join(chunks).decode(errors="replace")
    shown = set(re.findall(r"Qwen/Qwen3-0\.6B: validat(?:ing|ed) (\w+) \((?:float32|bfloat16), \d+/\d+\)", screen))
    assert len(shown) >= 2, screen[-2000:]
    assert shown <= {p.name for p in (tmp_path / "defs" / "problem_defs" / "hf").iterdir()}


def test_output_folder_mirrors_a_checkout_and_a_rerun_counts_what_it_wrote(tmp_path):
    """`extract -o DIR` from an empty folder writes only under DIR, as a checkout lays it out
    (DIR/problem_defs/hf, DIR/reference_impls/hf), says nothing of transformers' FutureWarnings, keeps its
    last line whole when piped and names folders that exist; a re-run leaves a file that differs only in the
    recorded tool versions as it is and counts problems written and unchanged; `--check -o DIR` reads there."""
    empty, out = tmp_path / "empty", tmp_path / "out"
    empty.mkdir()
    env = repo_env(ROOT, HF_HUB_OFFLINE="1")
    command = [sys.executable, "-m", "solbench", "extract", "--model", "meta-llama/Llama-3.2-1B", "-o", str(out)]
    result = subprocess.run(command, cwd=empty, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert list(empty.iterdir()) == []
    assert sorted(p.name for p in out.iterdir()) == ["problem_defs", "reference_impls"]
    problems = sorted(p.name for p in (out / "problem_defs" / "hf").iterdir())
    assert sorted(p.stem for p in (out / "reference_impls" / "hf").iterdir()) == problems
    assert "FutureWarning" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]  # one line, not wrapped at 80 columns
    where = f"in {out / 'problem_defs' / 'hf'} and {out / 'reference_impls' / 'hf'}"
    assert re.fullmatch(rf"{len(problems)} problems: {len(problems)} written, 0 unchanged {re.escape(where)} "
                        r"\(\d+\.\d s\)", last), last
    definition = out / "problem_defs" / "hf" / "swiglu_mlp_h2048_i8192" / "definition.json"
    older = definition.read_text().replace('"transformers_version": "', '"transformers_version": "0.0.1-')
    definition.write_text(older)
    edited = out / "reference_impls" / "hf" / f"{problems[0]}.py"
    edited.write_text(edited.read_text() + "# edited\n")
    rerun = subprocess.run([*command, "--no-validate"], cwd=empty, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    assert definition.read_text() == older  # the same extraction: not rewritten for a newer transformers
    assert "# edited" not in edited.read_text()
    assert f"{len(problems)} problems: 1 written, {len(problems) - 1} unchanged {where}" in rerun.stderr
    assert extract_cli.handle(_args(["--model", "meta-llama/Llama-3.2-1B", "--check", "-o", str(out)])) == 0


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_an_interrupted_extract_writes_the_models_that_finished(tmp_path, jobs):
    """Ctrl-C after the first model's line: its problems are written, the command says which were not, and
    exits 130 (results already made are never thrown away)."""
    from tests.signals import default_sigint

    env = repo_env(ROOT, HF_HUB_OFFLINE="1")
    out = tmp_path / "defs"
    command = [sys.executable, "-m", "solbench", "extract", "--model", "Qwen/Qwen3-0.6B", "--model",
               "openai/gpt-oss-120b", "--model", "deepseek-ai/DeepSeek-V3", "--jobs", jobs, "-o", str(out)]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, preexec_fn=default_sigint)
    lines = []
    for line in process.stdout:
        lines.append(line)
        if "Qwen/Qwen3-0.6B: " in line and "problems from" in line:
            process.send_signal(signal.SIGINT)
            break
    rest = process.communicate(timeout=600)[0]
    said = " ".join(("".join(lines) + rest).split())
    assert process.returncode == 130, said[-3000:]
    assert "Traceback" not in said
    written = {json.loads(p.read_text())["name"] for p in (out / "problem_defs" / "hf").glob("*/definition.json")}
    qwen = int(re.search(r"Qwen/Qwen3-0\.6B: (\d+) problems", said).group(1))
    assert len(written) >= qwen and any(n.startswith("rope_table_d128_theta1000000") for n in written), written
    finished = int(re.search(r"interrupted: (\d+) of 3 model\(s\) had finished", said).group(1))
    assert 1 <= finished < 3, said[-2000:]


def test_rope_inside_flag_reaches_the_extraction(tmp_path):
    """`--rope-inside` on the command line writes the fused attention and layer (no validation: the pipeline
    tests validate them; the extractions without the flag, everywhere else, write none)."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 1,
                                  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                                  "intermediate_size": 96, "vocab_size": 128}))
    common = ["--model", "tiny/qwen3-cli", "--config", str(config), "--no-validate"]
    assert extract_cli.handle(_args([*common, "--rope-inside", "-o", str(tmp_path)])) == 0
    fused = sorted(p.name.rsplit("_", 1)[0] for p in (tmp_path / "problem_defs" / "hf").iterdir()
                   if "rope_inside" in p.name)
    assert fused == ["qwen3_attention_with_rope_inside", "qwen3_decoder_layer_with_rope_inside"], fused
