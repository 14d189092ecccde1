"""A submit body turned into a queued job, without a server: problems sent by content land in the service's
folder once, as sent, whatever happened to that folder since."""

from __future__ import annotations

import json
import threading

import pytest

from solbench.orchestrator.config import RunConfig
from solbench.serve.requests import BadRequest, parse_submit
from tests.runner.conftest import write_problem
from tests.serve.conftest import GOOD


def content_of(folder) -> dict:
    return {"definition": json.loads((folder / "definition.json").read_text()),
            "workloads": [json.loads(line) for line in (folder / "workload.jsonl").read_text().splitlines()]}


def test_a_problem_sent_by_content_is_used_as_sent_even_after_its_folder_was_changed(tmp_path):
    content = content_of(write_problem(tmp_path / "client"))
    body = {"problem": content, "solution": {"source": GOOD, "filename": "k.py"}}
    first = parse_submit(body, RunConfig(device="cpu"), tmp_path / "service")
    assert first.problem.name == "axpy_fp32" and len(first.workloads) == 2 and first.solution is not None
    definition = first.problem.directory / "definition.json"
    tampered = json.loads(definition.read_text())
    tampered["reference"] = tampered["reference"].replace("2.0", "3.0")
    definition.write_text(json.dumps(tampered))
    again = parse_submit(body, RunConfig(device="cpu"), tmp_path / "service")
    assert again.problem.directory == first.problem.directory
    assert "x * 2.0 + y" in again.problem.definition.reference
    assert json.loads(definition.read_text()) == content["definition"]


def test_the_same_problem_sent_by_many_clients_at_once_is_written_once_without_errors(tmp_path):
    body = {"problem": content_of(write_problem(tmp_path / "client"))}
    errors: list[BaseException] = []

    def submit() -> None:
        try:
            parse_submit(body, RunConfig(device="cpu"), tmp_path / "service")
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert [p.name for p in (tmp_path / "service").iterdir()] and \
        not [p for p in (tmp_path / "service").iterdir() if p.name.endswith(".tmp")]


def test_options_that_thin_the_checks_are_the_operator_s(tmp_path):
    folder = write_problem(tmp_path / "client")
    for option in ("checked_timed_outputs", "timed_input_sets", "ipc_min_bytes", "lock_clocks"):
        with pytest.raises(BadRequest) as refused:
            parse_submit({"problem": str(folder), "options": {option: 0}}, RunConfig(device="cpu"), tmp_path)
        assert refused.value.fields == [f"options.{option}"]
    assert parse_submit({"problem": str(folder), "options": {"strict": True, "max_workloads": 1}},
                        RunConfig(device="cpu"), tmp_path).config.strict
