"""Tiny definitions for hand-checked analyser tests."""

from __future__ import annotations

from solbench.spec.definition import Definition


def make_definition(inputs: dict, outputs: dict, reference: str, axes: dict | None = None,
                    name: str = "t") -> Definition:
    """inputs/outputs: name -> (shape list, dtype); axes: name -> const value."""
    return Definition.from_dict({
        "name": name,
        "axes": {k: {"type": "const", "value": v} for k, v in (axes or {}).items()},
        "inputs": {k: {"shape": s, "dtype": d} for k, (s, d) in inputs.items()},
        "outputs": {k: {"shape": s, "dtype": d} for k, (s, d) in outputs.items()},
        "reference": reference,
    })


import pytest  # noqa: E402


@pytest.fixture
def definition_of():
    return make_definition
