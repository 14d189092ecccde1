"""The trace budget is deterministic: the same result whatever the wall clock says."""

from __future__ import annotations

import itertools

import torch

from solbench.sol import analyser, meta_tracer

LOOP = ("import torch\n"
        "def run(x):\n"
        "    y = x\n"
        "    for _ in {over}:\n"
        "        y = y + 1\n"
        "    return y\n")


def _loop(definition_of, n: int, over: str = "[None] * {n}"):
    """A loop of n ops; over a list by default (a `range` is watched and may stop early, `loops`)."""
    return definition_of({"x": (["N"], "float32")}, {"y": (["N"], "float32")},
                         LOOP.format(over=over.format(n=n)), {"N": 16}, name=f"loop{n}{over[:3]}")


def _fresh(monkeypatch):
    monkeypatch.setattr(analyser, "_captures", analyser.OrderedDict())


def _slow_clock(monkeypatch, seconds_per_call: float):
    ticks = itertools.count()
    monkeypatch.setattr(meta_tracer.time, "monotonic", lambda: next(ticks) * seconds_per_call)


def test_result_does_not_depend_on_wall_time(definition_of, monkeypatch):
    d = _loop(definition_of, 1000)
    _fresh(monkeypatch)
    idle = analyser.analyse(d, {})
    assert idle.method == "meta"
    _fresh(monkeypatch)
    _slow_clock(monkeypatch, 4.0)  # each clock read 4 s later: the old 5 s budget would have fired
    slow = analyser.analyse(d, {})
    assert slow.to_dict() == idle.to_dict()


def test_over_the_op_budget_fails_the_same_way_every_time(definition_of, monkeypatch):
    monkeypatch.setattr(meta_tracer, "MAX_OPS", 500)
    d = _loop(definition_of, 600)
    results = []
    for _ in range(2):
        _fresh(monkeypatch)
        results.append(analyser.analyse(d, {}).to_dict())
    assert results[0] == results[1]
    assert results[0]["method"] == "declared-io"
    assert any("more than 500 ops" in n for n in results[0]["notes"])
    _fresh(monkeypatch)
    assert analyser.analyse(_loop(definition_of, 400), {}).method == "meta"  # under the budget: traced


def test_real_element_budget(definition_of, monkeypatch):
    monkeypatch.setattr(meta_tracer, "MAX_REAL_ELEMENTS", 1000)
    ref = ("import torch\n"
           "def run(x):\n"
           "    m = torch.arange({n}).float().cumsum(0)\n"
           "    return x + m[:16]\n")
    traced = definition_of({"x": (["N"], "float32")}, {"y": (["N"], "float32")}, ref.format(n=100), {"N": 16},
                           name="small")
    over = definition_of({"x": (["N"], "float32")}, {"y": (["N"], "float32")}, ref.format(n=4000), {"N": 16},
                         name="big")
    _fresh(monkeypatch)
    assert analyser.analyse(traced, {}).method == "meta"
    cost = analyser.analyse(over, {})
    assert cost.method == "declared-io"
    assert any("constant elements" in n for n in cost.notes)


def test_wall_clock_safety_net_is_reported(definition_of, monkeypatch):
    _fresh(monkeypatch)
    _slow_clock(monkeypatch, meta_tracer.SAFETY_SECONDS)
    cost = analyser.analyse(_loop(definition_of, 1000), {})
    assert cost.method == "declared-io"
    assert any("wall-clock safety limit hit" in n for n in cost.notes)


def test_tracer_counts_no_real_elements_for_views():
    with meta_tracer.Tracer() as t:
        a = torch.arange(100)
        a.view(10, 10).t()[2:]
    assert t.real_elements == 100


def test_loop_bound_to_exceed_the_budget_stops_early(definition_of, monkeypatch):
    """range(5000) at one op a turn against a budget of 500: stopped after a few turns, same fallback."""
    monkeypatch.setattr(meta_tracer, "MAX_OPS", 500)
    _fresh(monkeypatch)
    cost = analyser.analyse(_loop(definition_of, 5000, "range({n})"), {})
    assert cost.method == "declared-io"
    assert any("loops over range(5000)" in n and "stopped after 3 turns" in n for n in cost.notes)
    _fresh(monkeypatch)
    assert analyser.analyse(_loop(definition_of, 450, "range({n})"), {}).method == "meta"  # under: runs in full
