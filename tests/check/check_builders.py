"""Definition builder for the output-checking tests (imported by name)."""

from __future__ import annotations

from solbench.spec.definition import Definition


def build_definition(outputs: dict, inputs: dict | None = None, axes: dict | None = None) -> Definition:
    inputs = inputs or {"x": {"shape": ["n"], "dtype": "float32"}}
    return Definition.from_dict({
        "name": "check_problem",
        "axes": axes if axes is not None else {"n": {"type": "var"}},
        "inputs": inputs,
        "outputs": outputs,
        "reference": f"def run({', '.join(inputs)}):\n    raise NotImplementedError\n",
    })
