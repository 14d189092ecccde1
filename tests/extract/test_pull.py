"""`solbench pull`: dataset rows -> problem folders, tested on a parquet built from the shared problems."""

from __future__ import annotations

import argparse
import json

import pytest

from solbench.cli import pull as pull_cli
from solbench.extract import pull
from solbench.spec.problem import load_problem

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _row(folder) -> dict:
    d = json.loads((folder / "definition.json").read_text())
    workloads = [json.loads(line) for line in (folder / "workload.jsonl").read_text().splitlines() if line.strip()]
    return {"name": d["name"], "hf_id": d.get("hf_id"), "description": d.get("description"),
            "axes": json.dumps(d["axes"]), "custom_inputs_entrypoint": d.get("custom_inputs_entrypoint"),
            "inputs": json.dumps(d["inputs"]), "outputs": json.dumps(d["outputs"]), "reference": d["reference"],
            "workloads": json.dumps(workloads)}


def _run(argv):
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    pull_cli.register(sub)
    args = parser.parse_args(["pull", *argv])
    return args.func(args)


def test_parquet_round_trip(sol_execbench_dir, tmp_path):
    folders = sorted((sol_execbench_dir / "L1").iterdir())[:12] + sorted((sol_execbench_dir / "FlashInfer-Bench").iterdir())[:3]
    rows = {"L1": [_row(f) for f in folders[:12]], "FlashInfer-Bench": [_row(f) for f in folders[12:]]}
    files = []
    for subset, subset_rows in rows.items():
        path = tmp_path / "dataset" / subset / "train-00000-of-00001.parquet"
        path.parent.mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(subset_rows), path)
        files.append(str(path))
    out = tmp_path / "out"
    assert _run(["--from-parquet", *files, "-o", str(out)]) == 0
    for folder in folders:
        subset = folder.parent.name
        mine = out / subset / folder.name
        assert json.loads((mine / "definition.json").read_text()) == json.loads((folder / "definition.json").read_text())
        assert (mine / "workload.jsonl").read_text().splitlines() == (folder / "workload.jsonl").read_text().splitlines()
        load_problem(mine)
    assert _run(["--from-parquet", files[0], "--subset", "L1", "-o", str(tmp_path / "only")]) == 0
    assert not (tmp_path / "only" / "FlashInfer-Bench").exists()


def test_subset_from_path():
    assert pull.subset_of("L1/train-00000-of-00001.parquet") == "L1"
    assert pull.subset_of("data/Quant-00000-of-00001.parquet") == "Quant"
    assert pull.subset_of("FlashInfer-Bench/train.parquet") == "FlashInfer-Bench"


def test_bad_row_is_refused():
    with pytest.raises(Exception, match="name"):
        pull.convert_row({"name": "../escape", "axes": "{}", "inputs": "{}", "outputs": "{}", "reference": "",
                          "workloads": "[]"})


def test_offline_pull_is_a_clear_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert _run(["nvidia/SOL-ExecBench", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--from-parquet" in err and "Traceback" not in err


def test_missing_parquet_file(tmp_path, capsys):
    assert _run(["--from-parquet", str(tmp_path / "nope.parquet")]) == 2
