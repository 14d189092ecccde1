"""Problem folders: discovery and loading, on made-up folders and on the 235 published problems."""

from __future__ import annotations

import time

import pytest

from solbench.spec import SpecError, discover_problems, load_problem
from tests.spec.spec_builders import make_definition, make_workload, write_problem


def test_load_problem_folder(tmp_path):
    folder = write_problem(tmp_path / "p", workloads=[make_workload("a"), make_workload("b", axes={"m": 9})])
    problem = load_problem(folder)
    assert problem.name == "scale_rows"
    assert [w.uuid for w in problem.workloads] == ["a", "b"]
    assert problem.directory == folder


def test_load_problem_from_definition_file(tmp_path):
    folder = write_problem(tmp_path / "p")
    assert load_problem(folder / "definition.json").directory == folder


def test_load_problem_errors(tmp_path):
    with pytest.raises(SpecError, match="not a problem folder"):
        load_problem(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpecError, match="no definition.json"):
        load_problem(tmp_path / "empty")
    folder = write_problem(tmp_path / "noworkloads")
    (folder / "workload.jsonl").unlink()
    with pytest.raises(SpecError, match="workload.jsonl does not exist"):
        load_problem(folder)


def test_definition_errors_name_the_file(tmp_path):
    folder = write_problem(tmp_path / "p", definition=make_definition(outputs={}))
    with pytest.raises(SpecError, match=r"definition\.json: definition declares no outputs"):
        load_problem(folder)
    (folder / "definition.json").write_text('{"name": "x",\n "axes": }')
    with pytest.raises(SpecError, match=r"not valid JSON at line 2") as raised:
        load_problem(folder)
    assert str(raised.value).count("definition.json") == 1  # the path once, not twice


def test_workload_errors_name_file_and_line(tmp_path):
    folder = write_problem(tmp_path / "p", workloads=[make_workload("a"), make_workload("b", axes={"m": 1, "n": 3})])
    with pytest.raises(SpecError, match=r"workload\.jsonl:2: .*const axis 'n'"):
        load_problem(folder)


def test_discover_problems(tmp_path):
    write_problem(tmp_path / "b" / "two")
    write_problem(tmp_path / "a" / "one")
    write_problem(tmp_path / "a" / "deeper" / "three")
    half = tmp_path / "c" / "half"  # a definition without workloads is not a problem folder
    write_problem(half)
    (half / "workload.jsonl").unlink()
    (tmp_path / "notes.txt").write_text("x")
    found = discover_problems(tmp_path)
    assert found == [tmp_path / "a" / "deeper" / "three", tmp_path / "a" / "one", tmp_path / "b" / "two"]
    assert discover_problems(tmp_path / "b" / "two") == [tmp_path / "b" / "two"]  # a problem folder itself
    assert discover_problems(tmp_path / "c") == []


def test_discover_missing_root(tmp_path):
    with pytest.raises(SpecError, match="not a folder"):
        discover_problems(tmp_path / "nowhere")


# -- the published dataset ------------------------------------------------------------------

def test_all_published_problems_load(sol_execbench_dir):
    """Every one of the 235 SOL-ExecBench problems loads unchanged, and every workload resolves."""
    start = time.perf_counter()
    folders = discover_problems(sol_execbench_dir)
    assert len(folders) == 235
    names, workloads = set(), 0
    for folder in folders:
        problem = load_problem(folder)  # resolves every workload's axes against the definition
        names.add(problem.name)
        for workload in problem.workloads:
            axes = problem.definition.resolve_axes(workload.axes)
            shapes = problem.definition.input_shapes(axes) | problem.definition.output_shapes(axes)
            assert all(s is None or all(isinstance(d, int) and d >= 0 for d in s) for s in shapes.values())
        workloads += len(problem.workloads)
    assert len(names) == 235
    assert workloads == 3957
    assert time.perf_counter() - start < 10


def test_published_categories(sol_execbench_dir):
    categories = {p.parent.name for p in discover_problems(sol_execbench_dir)}
    assert categories == {"L1", "L2", "Quant", "FlashInfer-Bench"}


def test_published_definitions_round_trip(sol_execbench_dir):
    for folder in discover_problems(sol_execbench_dir)[:40]:
        definition = load_problem(folder).definition
        assert type(definition).from_dict(definition.to_dict()) == definition
