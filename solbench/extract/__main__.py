"""`python -m solbench.extract ...`: the extract command without the top-level CLI."""

from __future__ import annotations

import argparse
import sys

from solbench.cli.extract import add_arguments, handle


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m solbench.extract")
    add_arguments(parser)
    return handle(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
