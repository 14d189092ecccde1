"""docs/agents.md's examples, run as written against a real service: its Python blocks in order, as one
script, then its `solbench submit` command (from a folder that holds the shipped problems and solutions);
and its table of timing flags, against the flags the timer can set."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

from solbench import api
from tests.child_env import repo_env
from tests.conftest import REPO_ROOT

DOC = REPO_ROOT / "docs" / "agents.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", DOC.read_text(), re.MULTILINE | re.DOTALL)


def test_the_agents_page_examples_run_against_a_real_service(service, tmp_path):
    for shipped in ("problem_defs", "solutions"):
        (tmp_path / shipped).symlink_to(REPO_ROOT / shipped)
    env = repo_env(REPO_ROOT, **{"SOLBENCH_SERVER": service.url})
    env.pop("SOLBENCH_TOKEN", None)
    script = "\n".join(blocks("python"))
    assert "client.evaluate_source" in script and "client.stream" in script
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASSED" in done.stdout
    commands = [line for block in blocks("bash") for line in block.splitlines() if line.startswith("solbench submit")]
    assert commands, "the page shows solbench submit"
    for command in commands:
        argv = shlex.split(command)
        done = subprocess.run([sys.executable, "-m", "solbench", *argv[1:]], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
    assert [t.status.value for t in api.read_traces([tmp_path / "traces.jsonl"])] == ["PASSED"]


def test_every_timing_flag_is_explained_to_agents():
    """A flag the timer can put on a latency has a row in docs/agents.md (what it means, what to do)."""
    from solbench.timing import captured, stats, timer

    flags = {value for module in (captured, stats, timer) for name, value in vars(module).items()
             if name.startswith("FLAG_") and isinstance(value, str)}
    assert {"wide_ci", "power_capped", "launch_bound"} <= flags
    page = DOC.read_text()
    assert sorted(f for f in flags if f"| `{f}`" not in page and f" `{f}` " not in page) == []
