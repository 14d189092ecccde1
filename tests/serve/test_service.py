"""`solbench serve` as a client sees it, on a real server process: submit, stream, poll, cancel, bad requests,
a killed worker re-queued once, two clients at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from solbench import api
from solbench.spec.trace import Status
from tests.child_env import repo_env
from tests.conftest import REPO_ROOT
from tests.runner.conftest import write_problem
from tests.serve.conftest import FAST, GOOD, WRONG, call, submission_body, wait_for

SLOW = "# solbench: problem=axpy_fp32\nimport time\n\ndef run(x, y):\n    time.sleep(600)\n    return x * 2.0 + y\n"
# Sleeps on its first call in each process: long enough to be killed there, then passes.
FIRST_CALL_SLOW = ("# solbench: problem=axpy_fp32\nimport time\nCALLS = []\n\ndef run(x, y):\n"
                   "    if not CALLS:\n        time.sleep(8)\n    CALLS.append(1)\n    return x * 2.0 + y\n")
DIES = "# solbench: problem=axpy_fp32\nimport os\n\ndef run(x, y):\n    os._exit(3)\n"


def poll(service, submission_id: str) -> dict:
    status, reply = call(service.url, f"/v1/submissions/{submission_id}")
    assert status == 200, reply
    return reply


def ended(service, submission_id: str) -> dict:
    return wait_for(lambda: (r := poll(service, submission_id))["state"] not in ("queued", "running") and r,
                    f"submission {submission_id} to end")


def running_solution_pid(service, submission_id: str) -> int:
    """The pid of the solution process serving `submission_id` now (waits until there is one)."""
    def pid():
        health = call(service.url, "/v1/health")[1]
        lane = health["lanes"]["cpu"]
        return lane["running"] == submission_id and lane["workers"]["solution"]
    return wait_for(pid, "the submission's solution process")


def test_submit_stream_and_poll_give_run_s_traces_kept_in_the_service_folder(service, tiny_problem):
    client = api.Client(service.url)
    submission = client.submit(tiny_problem, source=GOOD, filename="good.py", **FAST)
    streamed = list(client.stream(submission))
    assert [t.status for t in streamed] == [Status.PASSED] * 2
    assert sorted(t.workload_uuid for t in streamed) == ["w0-64", "w1-96"]
    reply = poll(service, submission)
    assert reply["state"] == "done" and reply["attempts"] == 1 and len(reply["traces"]) == 2
    assert [t["evaluation"]["status"] for t in reply["traces"]] == ["PASSED", "PASSED"]
    assert call(service.url, f"/v1/submissions/{submission}?since=1")[1]["traces"] == reply["traces"][1:]
    kept = api.read_traces([service.folder / "submissions" / f"{submission}.jsonl"])  # signed lines, on disk
    assert [t.to_dict() for t in kept] == reply["traces"] == [t.to_dict() for t in streamed]
    # the wrong kernel is caught exactly as `solbench run` catches it
    assert {t.status for t in client.evaluate(tiny_problem, source=WRONG, **FAST)} == {Status.INCORRECT_NUMERICAL}


def test_solbench_submit_writes_the_traces_and_exits_as_run_does(service, tiny_problem, tmp_path):
    solution = tmp_path / "wrong.py"
    solution.write_text(WRONG)
    out = tmp_path / "traces.jsonl"
    env = repo_env(REPO_ROOT)
    command = [sys.executable, "-m", "solbench", "submit", str(tiny_problem), "--solution", str(solution),
               "--server", service.url, "-o", str(out), "--trials", "2", "--iters", "3", "--no-adaptive",
               "--timing-rounds", "1", "--max-workloads", "1"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stderr  # a failed workload, as `solbench run` says it
    assert [t.status for t in api.read_traces([out])] == [Status.INCORRECT_NUMERICAL]
    refused = subprocess.run(command[:-2] + ["--max-workloads", "0"], env=env, capture_output=True, text=True,
                             timeout=600)
    assert refused.returncode == 2 and "--max-workloads" in refused.stderr and "Traceback" not in refused.stderr
    device = subprocess.run(command + ["--device", "cuda"], env=env, capture_output=True, text=True, timeout=600)
    assert device.returncode == 2 and "the service's" in device.stderr


@pytest.mark.parametrize(("body", "field"), [
    ({"problem": "/no/such/problem"}, "problem.path"),
    ({"solution": None}, "problem"),
    ({"problem": 3}, "problem"),
    ({"problem": {"definition": {}, "workloads": []}}, "problem.definition"),
    ({"problem": {"definition": {"name": "x"}}}, "problem.workloads"),
    ({"problem": "PROBLEM", "extra": 1}, "extra"),
    ({"problem": "PROBLEM", "solution": {"source": 5}}, "solution.source"),
    ({"problem": "PROBLEM", "solution": {"source": "# solbench: problem=other\ndef run(x, y):\n  return x\n"}},
     "solution"),
    ({"problem": "PROBLEM", "options": {"trials": "many"}}, "options.trials"),
    ({"problem": "PROBLEM", "options": {"no_such_option": 1}}, "options.no_such_option"),
    ({"problem": "PROBLEM", "options": {"device": "cuda"}}, "options.device"),
    ({"problem": "PROBLEM", "options": {"checked_timed_outputs": 0}}, "options.checked_timed_outputs"),
    ({"problem": "PROBLEM", "options": {"max_workloads": 0}}, "options.max_workloads"),
    ({"problem": "PROBLEM", "workloads": ["no-such-uuid"]}, "workloads"),
    ({"problem": "PROBLEM", "workloads": "w0-64"}, "workloads"),
])
def test_a_bad_request_gets_a_400_naming_its_fields(service, tiny_problem, body, field):
    if body.get("problem") == "PROBLEM":
        body = {**body, "problem": str(tiny_problem)}
    status, reply = call(service.url, "/v1/submissions", body)
    assert status == 400, reply
    assert any(f == field or f.startswith(field + ".") for f in reply["fields"]), reply
    assert reply["error"] and "\n" not in reply["error"]


def test_malformed_calls_get_one_line_errors_not_tracebacks(service):
    assert call(service.url, "/v1/submissions", raw=b"{not json")[0] == 400
    status, reply = call(service.url, "/v1/submissions/0123abcd")
    assert status == 404 and "0123abcd" in reply["error"]
    assert call(service.url, "/v1/submissions/0123abcd/cancel", method="POST", raw=b"")[0] == 404
    assert call(service.url, "/v1/nothing")[0] == 404
    assert call(service.url, "/v1/submissions/x?since=a")[0] == 400


def test_cancel_kills_a_running_submission_drops_a_queued_one_and_the_lane_goes_on(service, tiny_problem):
    status, slow = call(service.url, "/v1/submissions", submission_body(tiny_problem, SLOW))
    assert status == 202
    pid = running_solution_pid(service, slow["id"])
    queued = call(service.url, "/v1/submissions", submission_body(tiny_problem, GOOD))[1]
    assert poll(service, queued["id"])["state"] == "queued"  # one CPU lane, busy
    assert call(service.url, f"/v1/submissions/{queued['id']}/cancel", method="POST", raw=b"")[0] == 200
    assert call(service.url, f"/v1/submissions/{slow['id']}/cancel", method="POST", raw=b"")[0] == 200
    for submission in (slow, queued):
        reply = ended(service, submission["id"])
        assert reply["state"] == "cancelled" and reply["traces"] == []
    wait_for(lambda: not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0] == "Z",
             "the cancelled solution's process to die")
    assert poll(service, queued["id"])["attempts"] == 0  # never ran
    traces = api.Client(service.url).evaluate(tiny_problem, source=GOOD, max_workloads=1, **FAST)
    assert [t.status for t in traces] == [Status.PASSED]


def test_a_killed_worker_re_queues_its_job_once_and_a_second_crash_is_the_verdict(service, tiny_problem):
    body = {**submission_body(tiny_problem, FIRST_CALL_SLOW), "workloads": ["w0-64"]}
    submission = call(service.url, "/v1/submissions", body)[1]["id"]
    os.kill(running_solution_pid(service, submission), signal.SIGKILL)
    reply = ended(service, submission)
    assert reply["state"] == "done" and reply["attempts"] == 2
    assert [t["evaluation"]["status"] for t in reply["traces"]] == ["PASSED"]  # none lost, none twice
    assert len(api.read_traces([service.folder / "submissions" / f"{submission}.jsonl"])) == 1
    dies = call(service.url, "/v1/submissions", submission_body(tiny_problem, DIES))[1]["id"]
    reply = ended(service, dies)
    assert reply["state"] == "done" and reply["attempts"] == 2
    assert sorted(t["workload"]["uuid"] for t in reply["traces"]) == ["w0-64", "w1-96"]
    assert {t["evaluation"]["status"] for t in reply["traces"]} == {"RUNTIME_ERROR"}


def test_two_clients_at_once_each_get_their_own_verdicts(service, tiny_problem):
    results: dict[str, list[Status]] = {}

    def evaluate(name: str, source: str) -> None:
        results[name] = [t.status for t in api.Client(service.url).evaluate(tiny_problem, source=source, **FAST)]

    clients = [threading.Thread(target=evaluate, args=args) for args in (("good", GOOD), ("wrong", WRONG))]
    for client in clients:
        client.start()
    for client in clients:
        client.join()
    assert results == {"good": [Status.PASSED] * 2, "wrong": [Status.INCORRECT_NUMERICAL] * 2}


def test_a_problem_s_baseline_is_timed_once_and_reused_for_later_candidates(service, tmp_path):
    problem = write_problem(tmp_path / "with_baseline", sizes=(64,))
    (problem / "baseline.py").write_text("def run(x, y):\n    return x * 2.0 + y\n")
    client = api.Client(service.url)
    first, second = (client.evaluate(problem, source=source, **FAST) for source in (GOOD, GOOD.replace("x * 2.0 + y", "y + 2.0 * x")))
    assert [t.status for t in first + second] == [Status.PASSED] * 2
    reused = [w for w in second[0].evaluation.warnings if "baseline time reused" in w]
    assert not [w for w in first[0].evaluation.warnings if "baseline time reused" in w]
    assert reused and reused[0].startswith("shipped baseline")
    assert call(service.url, "/v1/health")[1]["reference_timings_reused"] >= 1
