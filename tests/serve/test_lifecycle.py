"""The service's trust boundary and its end: a token checked on every call (required beyond localhost), and
a stopped service that keeps every finished trace, which a restarted one still serves."""

from __future__ import annotations

import subprocess
import sys
import threading

from solbench import api
from solbench.serve.client import ServiceError
from tests.child_env import repo_env
from tests.conftest import REPO_ROOT
from tests.serve.conftest import FAST, GOOD, Service, call, submission_body, wait_for

TOKEN = "0123456789abcdef0123"
# Fast on the first workload (n=64), then slow on the second (n=96): the service stops between the two.
SLOW_SECOND = ("# solbench: problem=axpy_fp32\nimport time\n\ndef run(x, y):\n"
               "    if x.numel() > 64:\n        time.sleep(600)\n    return x * 2.0 + y\n")


def test_a_token_is_checked_on_every_call_and_required_beyond_localhost(tmp_path, tiny_problem):
    env = repo_env(REPO_ROOT)
    env.pop("SOLBENCH_TOKEN", None)
    refused = subprocess.run([sys.executable, "-m", "solbench", "serve", "--host", "0.0.0.0", "--port", "0",
                              "--device", "cpu", "--folder", str(tmp_path / "open")],
                             env=env, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "needs a token" in refused.stderr and "Traceback" not in refused.stderr
    assert not (tmp_path / "open").exists()  # refused before anything started
    service = Service(tmp_path / "service", token=TOKEN)
    try:
        for token in (None, "wrong-token-wrong-token"):
            assert call(service.url, "/v1/health", token=token)[0] == 401
            status, reply = call(service.url, "/v1/submissions", submission_body(tiny_problem, GOOD), token=token)
            assert status == 401 and "token" in reply["error"]
        assert call(service.url, "/v1/health", token=TOKEN)[0] == 200
        try:
            api.Client(service.url, token="").health()
            raise AssertionError("a call without the token was answered")
        except ServiceError as exc:
            assert exc.status == 401
        traces = api.Client(service.url, token=TOKEN).evaluate(tiny_problem, source=GOOD, max_workloads=1, **FAST)
        assert [t.status.value for t in traces] == ["PASSED"]
    finally:
        service.kill()


def test_a_stopped_service_keeps_its_finished_traces_and_a_restarted_one_serves_them(tmp_path, tiny_problem):
    folder = tmp_path / "service"
    service = Service(folder)
    try:
        submission = call(service.url, "/v1/submissions", submission_body(tiny_problem, SLOW_SECOND))[1]["id"]
        streamed: list = []
        ending: list = []

        def follow() -> None:
            try:
                streamed.extend(api.Client(service.url).stream(submission))
            except ServiceError as exc:
                ending.append(exc)

        reader = threading.Thread(target=follow)
        reader.start()
        wait_for(lambda: call(service.url, f"/v1/submissions/{submission}")[1]["finished"] == 1,
                 "the first workload's trace")
        assert service.stop() == 143  # SIGTERM mid-submission: a clean stop, the exit status of any SIGTERM'd command
        reader.join(120)
        assert not reader.is_alive()  # the open stream ended with the service
        assert [t.workload_uuid for t in streamed] == ["w0-64"]
    finally:
        service.kill()
    kept = api.read_traces([folder / "submissions" / f"{submission}.jsonl"])
    assert [(t.workload_uuid, t.status.value) for t in kept] == [("w0-64", "PASSED")]
    again = Service(folder)
    try:
        status, reply = call(again.url, f"/v1/submissions/{submission}")
        assert status == 200 and reply["state"] == "interrupted"
        assert [t["workload"]["uuid"] for t in reply["traces"]] == ["w0-64"]
        assert [t.workload_uuid for t in api.Client(again.url).stream(submission)] == ["w0-64"]
    finally:
        again.kill()
