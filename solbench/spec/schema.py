"""JSON Schema of each format, generated from its model into docs/formats/ (and checked against it by
tests/spec/test_format_schemas.py).

    python3 -m solbench.spec.schema [FOLDER]          # writes FOLDER/<format>.schema.json (docs/formats)
    python3 -m solbench.spec.schema --check [FOLDER]  # exit 1, naming them, where the files differ

A schema describes the form a model writes (`mode="serialization"`), the form other tools read.
Loading is a little wider than the schema: keys that only describe (`description`, `x-...`), the
published data's spellings (`required_match_ratio`, `language`) and older trace versions are accepted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from solbench.spec.definition import Definition
from solbench.spec.model import adapter
from solbench.spec.solution import Solution
from solbench.spec.trace import Trace
from solbench.spec.workload import Workload

FORMATS: dict[str, type] = {"definition": Definition, "workload": Workload, "solution": Solution, "trace": Trace}
DEFAULT_FOLDER = Path("docs") / "formats"


def schema_of(name: str) -> dict:
    schema = adapter(FORMATS[name]).json_schema(mode="serialization")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": f"solbench/{name}.schema.json",
            **schema}


def schema_text(name: str) -> str:
    return json.dumps(schema_of(name), indent=2, sort_keys=True) + "\n"


def stale_files(folder: Path) -> list[str]:
    """The schema files in `folder` that are missing or differ from the models."""
    return [name for name in FORMATS
            if not (folder / f"{name}.schema.json").is_file()
            or (folder / f"{name}.schema.json").read_text() != schema_text(name)]


def main(argv: list[str]) -> int:
    check = "--check" in argv
    rest = [a for a in argv if a != "--check"]
    folder = Path(rest[0]) if rest else DEFAULT_FOLDER
    if check:
        stale = stale_files(folder)
        for name in stale:
            print(f"{folder / f'{name}.schema.json'}: differs from the model; run python3 -m solbench.spec.schema")
        return 1 if stale else 0
    folder.mkdir(parents=True, exist_ok=True)
    for name in FORMATS:
        (folder / f"{name}.schema.json").write_text(schema_text(name))
        print(folder / f"{name}.schema.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
