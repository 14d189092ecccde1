"""The HTTP API under bad input (issue 47): a table of 200+ malformed requests (malformed JSON, wrong types,
unknown fields, oversized bodies, path traversal in every name), slow clients and concurrent submissions, sent
to one real `solbench serve`. Every bad request gets a 4xx with a one-line message; the service stays up,
answers no 5xx, loses and duplicates no submission, and writes nothing outside its folder."""

from __future__ import annotations

import copy
import json
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from solbench.serve.app import MAX_BODY_BYTES
from tests.runner.conftest import write_problem
from tests.serve.conftest import FAST, GOOD, Service, call, wait_for

MARK = "pwned"  # every traversal target's name: none may appear anywhere after the run
TRAVERSALS = ["../" * 6 + MARK, "/tmp/" + MARK, "..", ".", "a/../../" + MARK, "..\\..\\" + MARK, MARK + "\x00.py",
              "./../" + MARK]
# Valid submissions sent at once, beside the table: the reference as the solution, which the lane's warm solution
# process may keep (an untrusted solution gets a process of its own: seconds each on a loaded 2-core machine).
CONCURRENT, COMPLETED = 16, 3  # sent at once; the first COMPLETED run to the end, the others are then cancelled


def problem_payload(folder: Path) -> dict:
    return {"definition": json.loads((folder / "definition.json").read_text()),
            "workloads": [json.loads(line) for line in (folder / "workload.jsonl").read_text().splitlines()]}


def with_change(base: dict, path: tuple, value) -> dict:
    """`base` with the value at `path` (keys into nested dicts/lists) replaced (or deleted where value is ...)."""
    body = copy.deepcopy(base)
    target = body
    for key in path[:-1]:
        target = target[key]
    if value is ...:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return body


WRONG_VALUES = [None, True, 0, -1, 1.5, "text", [], {}, [1, "a"], {"k": "v"}]


def submit_cases(problem: Path) -> list[tuple[str, bytes]]:
    """(label, body) of POST /v1/submissions requests that must each be refused with a 4xx."""
    payload = problem_payload(problem)
    valid = {"problem": payload, "solution": {"source": GOOD, "filename": "k.py"}, "options": dict(FAST)}
    raw = [b"", b"{", b"[", b"{\"problem\":", b"nul", b"\xff\xfe\x00", b"{'problem': 1}", b"{}", b"[]", b"null",
           b"1", b"\"problem\"", b"{\"problem\": 1} trailing", b"[" * 100_000, b"{\"a\":" * 50_000,
           b"9" * 100_000, b"{\"problem\": \"\\ud800\"}", json.dumps(valid).encode()[:-1],
           b"{" + b" " * MAX_BODY_BYTES + b"}"]  # one byte past the limit: 413
    cases = [(f"raw {body[:20]!r}", body) for body in raw]
    shapes = {"top": (), "problem": ("problem",), "definition": ("problem", "definition"),
              "workloads": ("problem", "workloads"), "workload": ("problem", "workloads", 0),
              "axes": ("problem", "workloads", 0, "axes"), "tolerance": ("problem", "workloads", 0, "tolerance"),
              "solution": ("solution",), "options": ("options",), "inputs": ("problem", "definition", "inputs"),
              "reference": ("problem", "definition", "reference"), "outputs": ("problem", "definition", "outputs")}
    for label, path in shapes.items():
        for value in WRONG_VALUES:
            if path == ("solution",) and value is None:
                continue  # null: the reference as the solution, a valid request
            if path in (("options",), ("problem", "workloads", 0, "tolerance")) and value in (None, {}):
                continue  # the defaults: valid
            body = value if not path else with_change(valid, path, value)
            cases.append((f"{label} = {value!r}", json.dumps(body).encode()))
    for unknown in ("extra", "Problem", "__proto__", "token"):
        cases.append((f"unknown top field {unknown}", json.dumps({**valid, unknown: 1}).encode()))
        cases.append((f"unknown problem field {unknown}",
                      json.dumps(with_change(valid, ("problem", unknown), 1)).encode()))
        cases.append((f"unknown solution field {unknown}",
                      json.dumps(with_change(valid, ("solution", unknown), 1)).encode()))
        cases.append((f"unknown option {unknown}", json.dumps(with_change(valid, ("options", unknown), 1)).encode()))
    for option, value in (("trials", "2"), ("trials", -1), ("trials", 10**30), ("trials", 1.5), ("iters", 0),
                          ("timeout_s", "x"), ("timeout_s", -5.0), ("device", "cuda:7"), ("lock_clocks", True),
                          ("checked_timed_outputs", 0), ("timed_input_sets", 1), ("max_workloads", -3),
                          ("warmup", 1e308), ("target_rel_ci", -1.0), ("data_roots", "not a list")):
        cases.append((f"option {option}={value!r}", json.dumps(with_change(valid, ("options", option), value)).encode()))
    for name in TRAVERSALS:
        cases.append((f"problem.path {name!r}", json.dumps({**valid, "problem": {"path": name}}).encode()))
        cases.append((f"problem {name!r}", json.dumps({**valid, "problem": name}).encode()))
        cases.append((f"definition name {name!r}", json.dumps(with_change(valid, ("problem", "definition", "name"),
                                                                          name)).encode()))
        cases.append((f"workload uuid {name!r}", json.dumps(with_change(valid, ("problem", "workloads", 0, "uuid"),
                                                                        name)).encode()))
        cases.append((f"solution filename {name!r}", json.dumps(with_change(valid, ("solution", "filename"),
                                                                            name + ".py")).encode()))
        blob = {"type": "safetensors", "path": name, "tensor_key": "x"}
        cases.append((f"blob path {name!r}", json.dumps(with_change(valid, ("problem", "workloads", 0, "inputs", "x"),
                                                                    blob)).encode()))
        cases.append((f"solution JSON name {name!r}", json.dumps({**valid, "solution": {
            "name": name, "definition": payload["definition"]["name"], "author": "a",
            "spec": {"languages": ["pytorch"], "entry_point": "k.py::run"},
            "sources": [{"path": name, "content": GOOD}]}}).encode()))
        cases.append((f"workloads list {name!r}", json.dumps({**valid, "workloads": [name]}).encode()))
    return cases


def route_cases() -> list[tuple[str, str, str]]:
    """(label, method, path) of requests to routes with bad ids, bad queries, or no route at all."""
    cases = []
    for raw_id in TRAVERSALS + ["0" * 4000, "ZZZZ", "%00", "abc%2F..%2F..", "deadbeef" * 2, "'; drop table", "%2e%2e%2f" + MARK]:
        quoted = urllib.parse.quote(raw_id, safe="")
        for method, suffix in (("GET", ""), ("GET", "/traces"), ("POST", "/cancel")):
            cases.append((f"{method} id {raw_id[:30]!r}{suffix}", method, f"/v1/submissions/{quoted}{suffix}"))
    for path in ("/", "/v1", "/v2/health", "/v1/submissions/x/y/z", "/../../etc/passwd", "/v1/health/..",
                 "/v1/submissions?x=" + "a" * 1000):
        cases.append((f"GET {path[:30]}", "GET", path))
    cases += [("DELETE health", "DELETE", "/v1/health"), ("PUT submissions", "PUT", "/v1/submissions"),
              ("GET submissions", "GET", "/v1/submissions")]
    return cases


def ask(url: str, path: str, method: str = "GET", raw: bytes | None = None) -> tuple[int, dict]:
    """(status, reply) of one request; a reply that is not a JSON object is kept as {"raw": text}."""
    request = urllib.request.Request(url + path, data=raw, method=method)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            status, text = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read()
    try:
        reply = json.loads(text)
    except ValueError:
        reply = None
    return status, reply if isinstance(reply, dict) else {"raw": text[:300]}


def slow_client(url: str, stop: threading.Event) -> None:
    """A loopback client that trickles a request's headers, a byte at a time, until `stop` (bounded)."""
    host, port = urllib.parse.urlsplit(url).hostname, urllib.parse.urlsplit(url).port
    assert host in ("127.0.0.1", "localhost")
    with socket.create_connection((host, port), timeout=5) as sock:
        for byte in b"POST /v1/submissions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{\"problem\":":
            if stop.is_set():
                return
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                return  # the service closed a client this slow: allowed
            time.sleep(0.05)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad_requests")
    service = Service(root / "service")
    yield root, service
    service.kill()


def test_two_hundred_bad_requests_get_4xx_and_the_service_loses_nothing(served):
    root, service = served
    problem = write_problem(root / "problems", sizes=(64,))
    submits, routes = submit_cases(problem), route_cases()
    assert len(submits) + len(routes) >= 200
    stop = threading.Event()
    slow = [threading.Thread(target=slow_client, args=(service.url, stop), daemon=True) for _ in range(4)]
    for thread in slow:
        thread.start()
    good = {"problem": problem_payload(problem), "solution": None, "options": dict(FAST)}

    def send(case):
        if len(case) == 2:
            return case[0], ask(service.url, "/v1/submissions", "POST", case[1])
        return case[0], ask(service.url, case[2], case[1])

    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        accepted = [pool.submit(call, service.url, "/v1/submissions", good) for _ in range(CONCURRENT)]
        answers = list(pool.map(send, submits + routes))
        accepted = [f.result() for f in accepted]
    print(f"{len(answers)} bad requests answered in {time.monotonic() - started:.1f} s")
    stop.set()
    for thread in slow:
        thread.join(10)
    wrong = [(label, status, reply) for label, (status, reply) in answers
             if not 400 <= status < 500 or not isinstance(reply.get("error"), str) or not reply["error"]
             or "\n" in reply["error"] or "Traceback" in reply["error"]]
    assert not wrong, f"{len(wrong)} wrong answers: {wrong[:12]}"
    assert all(status == 202 for status, _ in accepted), accepted
    ids = [reply["id"] for _, reply in accepted]
    assert len(set(ids)) == CONCURRENT  # none duplicated
    for later in ids[COMPLETED:]:  # queued still (or running): cancelled, which must end them, not lose them
        assert ask(service.url, f"/v1/submissions/{later}/cancel", "POST")[0] == 200
    finals = [wait_for(lambda i=i: (lambda r: r if r[1]["state"] in ("done", "failed", "cancelled") else None)(
        call(service.url, f"/v1/submissions/{i}")), f"submission {i}")[1] for i in ids]
    print(f"{CONCURRENT} submissions ended after {time.monotonic() - started:.1f} s")
    assert [f["state"] for f in finals[:COMPLETED]] == ["done"] * COMPLETED  # none lost
    assert {f["state"] for f in finals[COMPLETED:]} <= {"done", "cancelled"}
    assert all(len(f["traces"]) == 1 and f["traces"][0]["evaluation"]["status"] == "PASSED"
               for f in finals if f["state"] == "done")
    assert all(len(f["traces"]) <= 1 for f in finals)  # none duplicated
    assert call(service.url, "/v1/health")[1]["submissions"]  # still up
    stored = {p.stem for p in (root / "service" / "submissions").glob("*.json")}
    assert stored == set(ids)  # every accepted submission on disk, and only those
    assert not [p for p in root.rglob(f"*{MARK}*")] and not list(Path("/tmp").glob(f"{MARK}*"))
