"""A real `solbench serve` process (on the CPU, on a free port) and what the tests send it."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from solbench.serve.process import ServiceProcess
from tests.child_env import repo_env
from tests.conftest import REPO_ROOT
from tests.runner.conftest import write_problem

pytest.importorskip("aiohttp", reason="solbench serve needs aiohttp: pip install 'solbench[serve]'")

START_WAIT_S = 300.0  # generous: worker start-up on a loaded 2-core machine
FAST = {"trials": 2, "warmup": 1, "iters": 3, "adaptive": False, "timing_rounds": 1, "timeout_s": 120.0}
GOOD = "# solbench: problem=axpy_fp32\ndef run(x, y):\n    return x * 2.0 + y\n"
WRONG = "# solbench: problem=axpy_fp32\ndef run(x, y):\n    return x * 3.0 + y\n"


class Service(ServiceProcess):
    """A `solbench serve` subprocess (on the CPU unless `device` says otherwise), started from the checkout."""

    def __init__(self, folder: Path, *args: str, token: str | None = None, device: str = "cpu"):
        env = repo_env(REPO_ROOT)
        super().__init__(folder, "--device", device, *args, token=token, start_wait_s=START_WAIT_S, env=env,
                         cwd=REPO_ROOT)


def call(url: str, path: str, body=None, token: str | None = None, method: str | None = None,
         raw: bytes | None = None) -> tuple[int, dict]:
    """(HTTP status, decoded JSON reply) of one request."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(url + path, data=data, method=method or ("POST" if data is not None else "GET"))
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def wait_for(predicate, what: str, timeout_s: float = 300.0, every_s: float = 0.2):
    """Poll `predicate` until it returns something truthy (generous deadline: a loaded CPU is slow)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(every_s)
    raise AssertionError(f"timed out waiting for {what}")


def submission_body(problem: Path, source: str | None, **options) -> dict:
    return {"problem": {"path": str(problem)}, "solution": {"source": source, "filename": "k.py"} if source else None,
            "options": {**FAST, **options}}


@pytest.fixture(scope="package")
def tiny_problem(tmp_path_factory) -> Path:
    return write_problem(tmp_path_factory.mktemp("problems"))


@pytest.fixture(scope="package")
def service(tmp_path_factory):
    """One service for the tests of this folder that leave it as they found it (start-up is seconds)."""
    running = Service(tmp_path_factory.mktemp("service"))
    yield running
    running.kill()
