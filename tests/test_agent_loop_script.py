"""benchmarks/agent_loop.py and its twenty candidates: what the script checks, without running a candidate."""

from __future__ import annotations

from tests.scripts import benchmark_script


def test_the_twenty_candidates_are_python_for_their_problem_in_both_languages(tmp_path):
    with benchmark_script("agent_candidates.py") as candidates:
        paths = candidates.write_candidates(tmp_path)
    assert len(paths) == len({p.name for p in paths}) == 20
    for path in paths:
        source = path.read_text()
        compile(source, str(path), "exec")
        assert source.startswith("# solbench: problem=layernorm_fp32_h1024\n")
    triton = [p for p in paths if "import triton" in p.read_text()]
    assert 0 < len(triton) < 20
    for kind in ("_wrong_", "_slow_"):  # wrong and slower variants in each language
        assert {p.name.split("_")[0] for p in paths if kind in p.name} == {"torch", "triton"}


def row(name: str, cold: list[str], served: list[str], cold_ms: float, served_ms: float) -> dict:
    def traces(statuses, ms):
        return [{"uuid": f"w{i}", "status": s, "latency_ms": ms, "seconds": 1.0, "phases": {"load": 0.5}}
                for i, s in enumerate(statuses)]
    return {"candidate": name, "cli": {"s": 10.0, "statuses": cold, "traces": traces(cold, cold_ms)},
            "serve": {"s": 1.5, "statuses": served, "traces": traces(served, served_ms)}}


def test_the_summary_fails_a_verdict_that_differs_and_reads_latencies_against_the_cold_runs(capsys):
    with benchmark_script("agent_loop.py") as script:
        same = [row("a", ["PASSED"] * 2, ["PASSED"] * 2, 1.0, 1.02)]
        assert script.print_summary(same, ["cli", "serve"], {"serve": 5.0})
        printed = capsys.readouterr().out
        assert "0.150x cli's" in printed and "median 1.020 over 2 workloads (within +-3%)" in printed
        differ = [*same, row("b", ["PASSED"], ["INCORRECT_NUMERICAL"], 1.0, 1.0)]
        assert not script.print_summary(differ, ["cli", "serve"], {})
        assert "verdicts DIFFER for b" in capsys.readouterr().out
        script.print_phase_table(same, ["cli", "serve"])
        table = capsys.readouterr().out
        assert "load" in table and "outside" in table  # 10 s of wall beside 2 s of workloads: 8 s outside
        assert [line.split()[1] for line in table.splitlines() if line.startswith("outside")] == ["8.000"]
