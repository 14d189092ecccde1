"""The one option table: `solbench run`'s flags and the pytest plugin's options come from `RunConfig`'s
field metadata, with the same defaults except where the table says why (the gate is strict)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from solbench.cli import build_parser
from solbench.cli.run import config_from_args
from solbench.orchestrator.config import RunConfig, configure
from solbench.orchestrator.options import gate_base, given_options, negative, run_options
from tests.plugin.conftest import run_pytest

REPO = Path(__file__).resolve().parents[1]


def run_flags() -> set[str]:
    parser = build_parser()
    run = next(a for a in parser._subparsers._group_actions if a.choices and "run" in a.choices).choices["run"]
    return set(run._option_string_actions)


def table_flags(door: str) -> set[str]:
    flags = set()
    for row in run_options():
        flag = row.flag(door)
        flags.add(f"--{flag}")
        if row.type is bool and not row.option.choices:
            flags.add(f"--{negative(flag)}")
    return flags


def test_the_cli_offers_every_option_of_the_table():
    missing = table_flags("cli") - run_flags()
    assert not missing


def test_the_plugin_offers_every_option_of_the_table(tmp_path, capsys):
    output = run_pytest(tmp_path, "--help", capsys=capsys).output
    offered = {word.split("=")[0].rstrip(",") for word in output.split() if word.startswith("--solbench-")}
    missing = table_flags("plugin") - offered
    assert not missing
    assert "--solbench-hw" in offered and "--solbench-no-strict" in offered


def test_the_two_doors_name_the_same_options():
    cli = {row.option.flag for row in run_options()}
    plugin = {row.flag("plugin").removeprefix("solbench-") for row in run_options()}
    renamed = {row.option.flag for row in run_options() if row.option.plugin_flag}
    assert renamed == {"baseline"}  # --solbench-baseline is the gate's leaderboard CSV
    assert cli - renamed == plugin - {row.option.plugin_flag for row in run_options() if row.option.plugin_flag}


def test_every_user_facing_field_is_in_the_table():
    internal = {"timed_input_sets", "checked_timed_outputs", "baseline_ms", "ipc_min_bytes"}
    assert {f.name for f in fields(RunConfig)} - internal == {row.name for row in run_options()} - {
        "quick", "baseline_csv"}


def test_no_flag_gives_the_fields_defaults_and_the_gate_differs_only_where_the_table_says():
    assert config_from_args(build_parser().parse_args(["run"])) == RunConfig()
    differing = {f.name for f in fields(RunConfig) if getattr(gate_base(), f.name) != getattr(RunConfig(), f.name)}
    assert differing == {row.name for row in run_options() if row.option.gate_default is not None} == {"strict"}
    assert "the CI gate fails them by default" in next(r.option.help for r in run_options() if r.name == "strict")
    assert "strict by default" in (REPO / "docs" / "ci.md").read_text()
    assert "is not strict by default" in (REPO / "README.md").read_text()


def test_flags_reach_the_config():
    args = build_parser().parse_args(["run", "--no-adaptive", "--baseline", "compile", "--data-root", "a",
                                      "--data-root", "b", "--hw", "H100", "--strict", "--max-workloads", "2"])
    config = config_from_args(args)
    assert (config.adaptive, config.baseline_compile, config.hw, config.strict, config.max_workloads) == (
        False, True, "H100", True, 2)
    assert config.data_roots == [Path("a"), Path("b")]


def test_the_power_cap_stop_can_be_turned_off_and_reaches_the_timer():
    assert RunConfig().timing_config("cuda").power_cap_stop is True
    config = config_from_args(build_parser().parse_args(["run", "--no-power-cap-stop"]))
    assert config.power_cap_stop is False and config.timing_config("cuda:0").power_cap_stop is False


def test_quick_never_overrides_what_was_asked_for():
    options = given_options(lambda dest: {"quick": True, "trials": 2}.get(dest), "cli")
    config = configure(**options)
    assert (config.trials, config.iters, config.timing_rounds) == (2, 3, 1)
