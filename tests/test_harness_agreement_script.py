"""benchmarks/harness_agreement.py: solbench's and NVIDIA's latencies matched per workload, with each one's spread."""

from __future__ import annotations

import json

import pytest

from tests.scripts import benchmark_script


def ours_file(path, latencies: dict[str, list[float]], failed: tuple[str, int] | None = None):
    rows = []
    for problem, values in latencies.items():
        for i, ms in enumerate(values):
            status = "INCORRECT_NUMERICAL" if failed == (problem, i) else "PASSED"
            rows.append({"problem": problem, "axes": f"n={i}", "status": status, "latency_ms": ms})
    path.write_text(json.dumps({"wall_s": 1.0, "rows": rows}))
    return path


def nvidia_file(path, latencies: dict[str, list[float]]):
    path.write_text(json.dumps([{"problem": name, "total": len(v), "passed": len(v), "failed": 0, "latencies_ms": v}
                                for name, v in latencies.items()]))
    return path


def test_workloads_are_matched_by_name_and_position_with_each_harness_s_spread(tmp_path, capsys):
    ours = [ours_file(tmp_path / "a.json", {"069_rms_norm": [0.030, 2.0], "007_gemm": [0.020]}),
            ours_file(tmp_path / "b.json", {"069_rms_norm": [0.031, 2.1], "007_gemm": [0.021]},
                      failed=("007_gemm", 0))]
    nvidia = [nvidia_file(tmp_path / "n1.json", {"L1/069_rms_norm": [0.10, 2.05], "FlashInfer-Bench/007_gemm": [0.02]}),
              nvidia_file(tmp_path / "n2.json", {"L1/069_rms_norm": [0.30, 2.05], "FlashInfer-Bench/007_gemm": [0.02]})]
    with benchmark_script("harness_agreement.py") as script:
        rows = script.agreements(script.ours_by_workload(ours), script.nvidia_by_workload(nvidia))
        by_key = {(a.problem, a.index): a for a in rows}
        assert set(by_key) == {("069_rms_norm", 0), ("069_rms_norm", 1), ("007_gemm", 0)}
        short = by_key["069_rms_norm", 0]
        assert short.ours_ms == [0.030, 0.031] and short.nvidia_ms == [0.10, 0.30]
        assert script.spread(short.nvidia_ms) == pytest.approx(2.0)  # 0.30 / 0.10 - 1
        assert short.ratio == pytest.approx(0.20 / 0.0305)
        assert by_key["069_rms_norm", 1].ratio == pytest.approx(2.05 / 2.05)
        assert by_key["007_gemm", 0].ours_ms == [0.020]  # the run that failed it gives no latency
        assert script.main(["--ours", *map(str, ours), "--nvidia", *map(str, nvidia)]) == 0
    out = capsys.readouterr().out
    assert "3 workloads in both harnesses" in out
    assert "calls under 0.1 ms (2)" in out and "NVIDIA 200.0%" in out


@pytest.mark.parametrize("content,message", [
    ("not json", "--ours"), (json.dumps([1, 2]), "not a --json file of benchmarks/throughput.py"),
    (json.dumps({"rows": [{"axes": "n=0"}]}), "not a --json file of benchmarks/throughput.py")])
def test_a_file_that_is_not_a_throughput_result_gets_one_line(tmp_path, content, message):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    nvidia = nvidia_file(tmp_path / "n.json", {"L1/x": [1.0]})
    with benchmark_script("harness_agreement.py") as script, pytest.raises(SystemExit, match=message):
        script.main(["--ours", str(bad), "--nvidia", str(nvidia)])


@pytest.mark.parametrize("summary", [{"problem": "L1/x"}, [{"latencies_ms": [1.0]}],
                                     [{"problem": "L1/x", "latencies_ms": ["fast"]}],
                                     [{"problem": "L1/x", "latencies_ms": 1.0}]])
def test_a_file_that_is_not_nvidia_s_summary_gets_one_line(tmp_path, summary):
    ours = ours_file(tmp_path / "a.json", {"x": [1.0]})
    bad = tmp_path / "summary.json"
    bad.write_text(json.dumps(summary))
    with benchmark_script("harness_agreement.py") as script, pytest.raises(SystemExit, match="not the summary.json"):
        script.main(["--ours", str(ours), "--nvidia", str(bad)])


def test_no_common_workload_is_said_so(tmp_path):
    ours = ours_file(tmp_path / "a.json", {"069_rms_norm": [0.03]})
    nvidia = nvidia_file(tmp_path / "n.json", {"L1/084_silu": [0.03]})
    with benchmark_script("harness_agreement.py") as script, pytest.raises(SystemExit, match="no workload is in both"):
        script.main(["--ours", str(ours), "--nvidia", str(nvidia)])
