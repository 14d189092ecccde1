"""The ratio floor `benchmarks/throughput.py` prints: which workloads it counts and what it adds up."""

import pytest

from tests.scripts import benchmark_script


@pytest.fixture(scope="module")
def throughput():
    with benchmark_script("throughput.py") as module:
        yield module


def row(latency_ms, gpu_timed, **phases):
    return {"problem": "p", "axes": "", "status": "PASSED", "seconds": 9.0, "gpu_timed": gpu_timed,
            "latency_ms": latency_ms, "phases": {k.replace("__", "."): v for k, v in phases.items()}}


def test_floor_adds_the_named_parts_over_timed_gpu_seconds(throughput):
    rows = [row(2.0, 1.0, timing__loop=1.6, trials=0.2, judge=0.3, timing__warmup=5.0)]
    assert throughput.ratio_floor(rows, ("timing.loop",)) == pytest.approx([1.6])
    assert throughput.ratio_floor(rows, ("timing.loop", "trials", "judge")) == pytest.approx([2.1])


def test_floor_leaves_out_short_calls_and_untimed_workloads(throughput):
    rows = [row(0.5, 1.0, timing__loop=3.0), row(None, 0.0, timing__loop=1.0), row(1.0, 2.0, timing__loop=2.5)]
    assert throughput.ratio_floor(rows, ("timing.loop",)) == pytest.approx([1.25])


def test_table_prints_the_floor_lines(throughput, capsys):
    rows = [row(2.0, 1.0, timing__loop=1.6, trials=0.2, judge=0.3), row(3.0, 1.0, timing__loop=1.2)]
    throughput.print_table(rows, 20.0)
    out = capsys.readouterr().out
    assert "floor from the timed loop alone: median 1.40, 1 of 2 over 1.5" in out
    assert "floor from the timed loop and the correctness checks: median 1.65, 1 of 2 over 1.5" in out


@pytest.mark.parametrize("text", ["not json", '{"rows": []}', '{"rows": [{"problem": "p"}], "wall_s": 1}'])
def test_from_json_refuses_other_files_in_one_line(throughput, tmp_path, monkeypatch, text):
    saved = tmp_path / "saved.json"
    saved.write_text(text)
    monkeypatch.setattr("sys.argv", ["throughput.py", "--from-json", str(saved)])
    with pytest.raises(SystemExit, match="not a --json file of this script"):
        throughput.main()


def test_from_json_reprints_a_saved_run(throughput, tmp_path, monkeypatch, capsys):
    saved = tmp_path / "saved.json"
    saved.write_text('{"wall_s": 20.0, "rows": [{"problem": "p", "axes": "", "status": "PASSED", "seconds": 3.0, '
                     '"gpu_timed": 1.0, "latency_ms": 2.0, "phases": {"timing.loop": 1.6}}]}')
    monkeypatch.setattr("sys.argv", ["throughput.py", "--from-json", str(saved)])
    assert throughput.main() == 0
    assert "floor from the timed loop alone: median 1.60, 1 of 1 over 1.5" in capsys.readouterr().out
