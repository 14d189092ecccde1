"""The anti-cheat suite submitted through a `solbench serve` instead of one scheduler run (issue 35: the
service must give the suite's verdicts): each case's problem copy sent by path, its solution by content,
with the suite's fast settings. Used by tests/serve/test_anticheat_served.py and benchmarks/anticheat_gpu.py."""

from __future__ import annotations

from pathlib import Path

from tests.anticheat.suite import PROBLEMS, Case, fast_config, load_case


def submit_cases(cases: list[Case], root: Path, client, device: str = "cpu", config=None,
                 on_trace=None) -> dict[str, list]:
    """Submit every case at once, then stream each back; traces by case id (`on_trace(case id, trace)` as each
    arrives, case by case)."""
    from solbench.cli.submit import sent_options  # inner: the CLI's option translation, only for this door
    from solbench.spec.problem import load_problem  # inner: as in suite.run_cases

    config = config or fast_config(device)
    submitted: dict[str, str] = {}
    for case in cases:
        suite_problem = PROBLEMS[case.problem]
        folder = suite_problem.write(root / "cases" / case.kind / case.name)
        solution = load_case(case, load_problem(folder).definition)
        options = sent_options(config)
        if suite_problem.all_workloads:
            options.pop("max_workloads", None)
        submitted[case.id] = client.submit(problem_path=str(folder), solution=solution, **options)
    out: dict[str, list] = {}
    for case_id, submission in submitted.items():
        out[case_id] = []
        for trace in client.stream(submission):
            out[case_id].append(trace)
            if on_trace is not None:
                on_trace(case_id, trace)
    return out
