"""Write a deliberately slowed copy of a Python solution, to prove the regression gate trips.

    python tests/plugin/slow_copy.py solutions/foo.py /tmp/slowed/foo.py --repeat 4

The copy keeps the solution's name (same file name, or the JSON's `name`) so the gate matches it to its
recorded result; `run` keeps its signature and calls the original `repeat` times, so every output
is still correct and the kernel does `repeat` times the work. Solution JSONs whose entry point is a
`.py` source are handled too (the copy inlines every source).
"""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

RENAMED = "_solbench_unslowed_run"


def slow_source(source: str, repeat: int, function: str = "run") -> str:
    tree = ast.parse(source)
    node = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function), None)
    if node is None:
        raise SystemExit(f"no top-level def {function}(...) to slow down")
    params = [a.arg for a in node.args.posonlyargs + node.args.args]
    lines = source.splitlines()
    lines[node.lineno - 1] = lines[node.lineno - 1].replace(f"def {function}", f"def {RENAMED}", 1)
    call = f"{RENAMED}({', '.join(params)})"
    return "\n".join(lines) + (f"\n\n\ndef {function}({', '.join(params)}):\n"
                               f"    for _ in range({repeat - 1}):\n        {call}\n    return {call}\n")


def slow_copy(src: Path, dst: Path, repeat: int) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.suffix == ".py":
        dst.write_text(slow_source(src.read_text(), repeat))
        return dst
    data = json.loads(src.read_text())
    entry_file, function = data["spec"]["entry_point"].split("::")
    for item in data["sources"]:
        content = item.get("content") or (src.parent / item["path"]).read_text()
        item["content"] = slow_source(content, repeat, function) if item["path"] == entry_file else content
    dst.write_text(json.dumps(data, indent=2))
    return dst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("destination", type=Path)
    parser.add_argument("--repeat", type=int, default=4)
    args = parser.parse_args()
    print(slow_copy(args.source, args.destination, args.repeat))


if __name__ == "__main__":
    main()
