"""Submissions kept apart on a GPU worker (issue 47): no PID namespace there, so the read rules alone keep
a solution from the service's folder, the trace file and other processes' `/proc` entries. A full
`solbench run --device cuda` of the snooping solution (tests/anticheat/test_isolation.py), as root and as
an ordinary user; it still passes. Needs a CUDA GPU (`gpu` marker)."""

from __future__ import annotations

import pytest

from tests.anticheat.test_containment import NOBODY
from tests.anticheat.test_isolation import run_snooper


@pytest.mark.gpu
@pytest.mark.parametrize("uid", [pytest.param(0, id="root"), pytest.param(NOBODY, id="ordinary_user")])
def test_a_gpu_solution_reads_nothing_of_the_service_or_other_processes(tmp_path, uid):
    trace, rounds = run_snooper(tmp_path, uid, "cuda")
    sandbox = trace["evaluation"]["environment"]["sandbox"]
    assert sandbox["reads"].startswith("landlock"), sandbox
    assert sandbox["proc"].startswith("landlock"), sandbox
    print(f"uid {uid}: reads = {sandbox['reads']}; proc = {sandbox['proc']}; attempts seen: {sorted(rounds[-1])}")
