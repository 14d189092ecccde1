"""The service's token never in a command line or in an environment a worker inherits (issue 47): read from a
file, stdin or $SOLBENCH_TOKEN (removed from the service's environment, its /proc view overwritten), `--token
VALUE` deprecated with a warning."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys

import pytest

from solbench import api
from solbench.serve import auth
from solbench.serve.process import READY_MARK
from solbench.spec.trace import Status
from tests.child_env import repo_env
from tests.conftest import REPO_ROOT
from tests.serve.conftest import FAST

TOKEN = "tok-" + "5a1t" * 6
# A solution that looks for the token everywhere it can read: its environment, and every process's command line
# and environment under /proc. It answers wrongly if it finds it, so a PASSED verdict says it found nothing.
PROBE = f"""# solbench: problem=axpy_fp32
import os

def _seen():
    secret = {TOKEN!r}.encode()
    if any(secret in v.encode() for v in os.environ.values()):
        return True
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        for part in ("cmdline", "environ"):
            try:
                with open(f"/proc/{{pid}}/{{part}}", "rb") as f:
                    if secret in f.read():
                        return True
            except OSError:
                pass
    return False

SEEN = _seen()

def run(x, y):
    return x * (3.0 if SEEN else 2.0) + y
"""


def test_the_token_comes_from_a_file_stdin_or_the_environment_and_argv_is_deprecated(tmp_path, monkeypatch):
    warnings: list[str] = []
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    assert auth.read_token(None, str(path), warnings.append) == TOKEN and warnings == []
    path.chmod(0o644)
    assert auth.read_token(None, str(path), warnings.append) == TOKEN and "readable by other users" in warnings[-1]
    monkeypatch.setattr(sys, "stdin", io.StringIO(TOKEN + "\n"))
    assert auth.read_token(None, "-", warnings.append) == TOKEN
    assert auth.read_token(TOKEN, None, warnings.append) == TOKEN and "deprecated" in warnings[-1]
    monkeypatch.setenv(auth.TOKEN_ENV, TOKEN)
    assert auth.read_token(None, None, warnings.append) == TOKEN
    assert auth.TOKEN_ENV not in os.environ  # gone before any worker starts
    (tmp_path / "empty").write_text("\n")
    for argv, file, says in ((None, str(tmp_path / "absent"), "cannot read"), (None, str(tmp_path / "empty"), "empty"),
                             (TOKEN, str(path), "not both")):
        with pytest.raises(ValueError, match=says):
            auth.read_token(argv, file, warnings.append)


def test_bad_token_options_end_in_one_line_and_exit_2(tmp_path):
    env = repo_env(REPO_ROOT)
    env.pop(auth.TOKEN_ENV, None)
    base = [sys.executable, "-m", "solbench", "serve", "--device", "cpu", "--folder", str(tmp_path / "f")]
    missing = subprocess.run(base + ["--token-file", str(tmp_path / "absent")], env=env, capture_output=True,
                             text=True, timeout=300)
    assert missing.returncode == 2 and "cannot read the token file" in missing.stderr
    deprecated = subprocess.run(base + ["--token", TOKEN, "--port", "70000"], env=env, capture_output=True,
                                text=True, timeout=300)
    assert deprecated.returncode == 2 and "--token VALUE is deprecated" in deprecated.stderr
    assert "Traceback" not in missing.stderr + deprecated.stderr


def test_a_service_given_the_token_by_environment_keeps_it_from_its_workers_and_proc(tmp_path, tiny_problem):
    env = repo_env(REPO_ROOT, **{auth.TOKEN_ENV: TOKEN})
    proc = subprocess.Popen([sys.executable, "-m", "solbench", "serve", "--port", "0", "--device", "cpu",
                             "--folder", str(tmp_path / "service")], env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        line = proc.stdout.readline()  # printed once it listens, its workers started
        assert READY_MARK in line, line
        url = line.split(READY_MARK)[1].split()[0]
        for part in ("cmdline", "environ"):
            with open(f"/proc/{proc.pid}/{part}", "rb") as f:
                assert TOKEN.encode() not in f.read(), part
        traces = api.Client(url, token=TOKEN).evaluate(tiny_problem, source=PROBE, max_workloads=1, **FAST)
        assert [t.status for t in traces] == [Status.PASSED], traces[0].evaluation.log[-800:]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the service and its workers
        proc.wait(timeout=60)
