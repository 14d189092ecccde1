"""The Python client of `solbench serve` (`solbench.api.Client`), on the standard library's HTTP client: an
agent's process needs no server library, no torch import and no GPU to ask for verdicts.

    client = Client("http://127.0.0.1:8470")
    traces = client.evaluate("problem_defs/core/rmsnorm_h4096", "my_rmsnorm.py", max_workloads=4)
"""

from __future__ import annotations

import http.client
import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from solbench.serve.auth import TOKEN_ENV
from solbench.spec.problem import DEFINITION_FILE, WORKLOAD_FILE, find_baseline
from solbench.spec.solution import Solution, load_solution
from solbench.spec.trace import Trace

DEFAULT_URL = "http://127.0.0.1:8470"
SERVER_ENV = "SOLBENCH_SERVER"


class ServiceError(Exception):
    """What the service refused or could not do: the HTTP status, its one-line reason, the fields it names."""

    def __init__(self, status: int, message: str, fields: list[str] | None = None):
        super().__init__(f"{status}: {message}" + (f" (fields: {', '.join(fields)})" if fields else ""))
        self.status, self.message, self.fields = status, message, list(fields or [])


def problem_payload(problem: str | Path) -> dict:
    """A problem folder as the service takes it by content: its definition, its workloads, its shipped
    optimised baseline (if any), so the service need not see the client's files."""
    folder = Path(problem)
    folder = folder.parent if folder.is_file() else folder
    try:
        definition = json.loads((folder / DEFINITION_FILE).read_text())
        workloads = [json.loads(line) for line in (folder / WORKLOAD_FILE).read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError) as exc:
        raise ServiceError(400, f"{folder} is not a readable problem folder: {exc}", ["problem"]) from None
    payload = {"definition": definition, "workloads": workloads}
    baseline = find_baseline(folder)
    if baseline is not None:
        payload["baseline"] = baseline.read_text()
    return payload


def solution_payload(solution: Solution | str | Path | None, source: str | None, filename: str) -> dict | None:
    if source is not None:
        return {"source": source, "filename": filename}
    if solution is None:
        return None
    if isinstance(solution, Solution):
        return solution.to_dict()
    path = Path(solution)
    if path.suffix == ".json":
        return load_solution(path).to_dict()  # its sources' contents read from beside it
    return {"source": path.read_text(), "filename": path.name}


class Client:
    """Submit, stream, poll and cancel on a `solbench serve` (default: $SOLBENCH_SERVER, else localhost:8470;
    token: $SOLBENCH_TOKEN unless given)."""

    def __init__(self, url: str | None = None, token: str | None = None, timeout_s: float = 60.0):
        self.url = (url or os.environ.get(SERVER_ENV) or DEFAULT_URL).rstrip("/")
        self.token = token if token is not None else os.environ.get(TOKEN_ENV)
        self.timeout_s = timeout_s

    def _open(self, method: str, path: str, body: dict | None = None, timeout_s: float | None = -1.0):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            return urllib.request.urlopen(request, timeout=self.timeout_s if timeout_s == -1.0 else timeout_s)
        except urllib.error.HTTPError as exc:
            try:
                reply = json.loads(exc.read() or b"{}")
            except json.JSONDecodeError:
                reply = {}
            raise ServiceError(exc.code, reply.get("error", exc.reason), reply.get("fields")) from None
        except (urllib.error.URLError, OSError) as exc:
            raise ServiceError(0, f"cannot reach the service at {self.url}: {getattr(exc, 'reason', exc)}") from None

    def _json(self, method: str, path: str, body: dict | None = None) -> dict:
        with self._open(method, path, body) as response:
            return json.loads(response.read())

    def health(self) -> dict:
        return self._json("GET", "/v1/health")

    def submit(self, problem: str | Path | None = None, solution: Solution | str | Path | None = None, *,
               source: str | None = None, filename: str = "solution.py", problem_path: str | None = None,
               workloads: list[str] | None = None, **options: Any) -> str:
        """Queue a solution (a file, a `Solution`, or `source` text; none: the reference) on a problem (a local folder,
        sent by content; or `problem_path`, a folder on the service's machine); its submission id. `options`
        are `solbench run`'s (RunConfig fields), e.g. max_workloads=4, strict=True."""
        if (problem is None) == (problem_path is None):
            raise ServiceError(400, "give either a problem folder or problem_path", ["problem"])
        body = {"problem": {"path": problem_path} if problem_path else problem_payload(problem),
                "solution": solution_payload(solution, source, filename), "workloads": workloads,
                "options": {k: (list(map(str, v)) if k == "data_roots" else v) for k, v in options.items()}}
        return self._json("POST", "/v1/submissions", body)["id"]

    def poll(self, submission_id: str, since: int = 0) -> dict:
        """The submission's state (queued, running, done, cancelled, failed, interrupted) and traces from `since`."""
        return self._json("GET", f"/v1/submissions/{submission_id}?since={since}")

    def stream(self, submission_id: str) -> Iterator[Trace]:
        """Each trace as it finishes, until the submission ends (no time limit: a workload may take minutes)."""
        with self._open("GET", f"/v1/submissions/{submission_id}/traces", timeout_s=None) as response:
            try:
                for line in response:
                    if line.strip():
                        yield Trace.from_dict(json.loads(line))
            except (http.client.HTTPException, OSError) as exc:  # the service stopped mid-stream
                raise ServiceError(0, f"the service closed the stream of {submission_id}: {exc!r}") from None

    def cancel(self, submission_id: str) -> dict:
        return self._json("POST", f"/v1/submissions/{submission_id}/cancel")

    def evaluate(self, problem: str | Path, solution: Solution | str | Path | None = None,
                 **kwargs: Any) -> list[Trace]:
        """Submit and wait: the traces, one per workload (`submit`'s arguments)."""
        return list(self.stream(self.submit(problem, solution, **kwargs)))

    def evaluate_source(self, problem: str | Path, source: str, filename: str = "solution.py",
                        **kwargs: Any) -> list[Trace]:
        """Evaluate source code held in memory (what an agent just wrote)."""
        return self.evaluate(problem, source=source, filename=filename, **kwargs)
