"""The one option table, as command-line flags: `solbench run`'s and the pytest plugin's are generated here.

The table is `RunConfig`'s field metadata (`config.Option`: flag, help, metavar, the gate's own default),
plus the two options `configure` takes besides the fields (`quick`, `baseline_csv`). Every generated
option defaults to None, which `configure` reads as "not given": a door's defaults are the fields'
(the gate's where `gate_default` says so), and `--quick` never overrides what was asked for explicitly.
The help text names the default each door applies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

from solbench.orchestrator.config import Option, RunConfig

PLUGIN_PREFIX = "solbench-"
_TYPES = {"bool": bool, "int": int, "float": float, "str": str, "list[Path]": Path, "Path": Path}


@dataclass(frozen=True)
class RunOption:
    """One row of the table: `name` is `configure`'s keyword (a `RunConfig` field, `quick` or `baseline_csv`)."""

    name: str
    type: type
    default: Any
    option: Option

    def flag(self, door: str) -> str:
        """The long flag without dashes for "cli" or "plugin"."""
        if door == "cli":
            return self.option.flag
        return PLUGIN_PREFIX + (self.option.plugin_flag or self.option.flag)

    def dest(self, door: str) -> str:
        return self.name if door == "cli" else "solbench_" + self.name

    def door_default(self, door: str) -> Any:
        if door == "plugin" and self.option.gate_default is not None:
            return self.option.gate_default
        return self.default


EXTRA_OPTIONS = (
    RunOption("quick", bool, False, Option("quick", "smoke-test settings (1 trial, 1 warm-up, 3 timed iterations, "
                                                    "1 round); timings are not meaningful")),
    RunOption("baseline_csv", Path, None, Option("baseline-csv", "published baseline times (columns workload_uuid, "
                                                                 "baseline_ms); the score's baseline is the fastest "
                                                                 "of these and the measured reference",
                                                 metavar="CSV")),
)


def run_options() -> list[RunOption]:
    """Every option of the table, in `RunConfig`'s field order, then the extras."""
    rows = []
    for f in fields(RunConfig):
        if "option" not in f.metadata:
            continue
        default = None if f.default is MISSING else f.default
        rows.append(RunOption(f.name, _TYPES[str(f.type).replace(" | None", "")], default, f.metadata["option"]))
    return rows + list(EXTRA_OPTIONS)


def _help(row: RunOption, door: str, prefix: str) -> str:
    default = row.door_default(door)
    if row.type is bool and row.option.choices:
        return f"{row.option.help} (default: {row.option.choices[bool(default)]})"
    if row.type is bool:
        return f"{row.option.help} (default: {'--' + prefix if default else '--' + negative(prefix)})"
    return row.option.help + (f" (default: {default})" if default is not None else "")


def negative(flag: str) -> str:
    """`strict` -> `no-strict`; `solbench-strict` -> `solbench-no-strict` (the plugin's flags keep their prefix)."""
    return (PLUGIN_PREFIX + "no-" + flag.removeprefix(PLUGIN_PREFIX) if flag.startswith(PLUGIN_PREFIX)
            else "no-" + flag)


def add_options(add: Callable[..., Any], door: str) -> None:
    """Add every option of the table through `add` (argparse's `add_argument`, or a pytest group's
    `addoption`) with the flags, names and help of `door` ("cli" or "plugin")."""
    for row in run_options():
        flag, dest = row.flag(door), row.dest(door)
        text = _help(row, door, flag).replace("%", "%%")
        if row.type is bool and row.option.choices:
            add(f"--{flag}", dest=dest, choices=row.option.choices, default=None, help=text)
        elif row.type is bool:
            add(f"--{flag}", dest=dest, action="store_true", default=None, help=text)
            add(f"--{negative(flag)}", dest=dest, action="store_false", default=None, help=f"not --{flag}")
        elif row.option.repeat:
            add(f"--{flag}", dest=dest, type=row.type, action="append", default=None, metavar=row.option.metavar,
                help=text)
        else:
            add(f"--{flag}", dest=dest, type=row.type, default=None, metavar=row.option.metavar, help=text)


def given_options(value_of: Callable[[str], Any], door: str) -> dict[str, Any]:
    """`configure`'s keywords from parsed options (`value_of(dest)`); an option not given is None."""
    values = {}
    for row in run_options():
        value = value_of(row.dest(door))
        if value is not None and row.type is bool and row.option.choices:
            value = value == row.option.choices[1]
        values[row.name] = value
    return values


def gate_base() -> RunConfig:
    """The run configuration the pytest gate starts from: the fields' defaults, with the gate's own."""
    return RunConfig(**{row.name: row.option.gate_default for row in run_options()
                        if row.option.gate_default is not None and row.name in RunConfig.__dataclass_fields__})
