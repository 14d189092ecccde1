"""A problem before it is written: declarations, reference body, input recipe and how to validate it.

The reference file is assembled here so that `definition.json` and `reference_impls/` come from one
string: a header, imports, a generated `get_inputs` (realistic scales, structured indices) and the
family's `run`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

TORCH_DTYPES = {"bfloat16": "torch.bfloat16", "float16": "torch.float16", "float32": "torch.float32",
                "int64": "torch.int64", "int32": "torch.int32", "bool": "torch.bool", "float64": "torch.float64",
                "int8": "torch.int8", "uint8": "torch.uint8"}


@dataclass(frozen=True)
class Arg:
    """An input or output tensor, and (for inputs) how `get_inputs` fills it.

    init: "randn", "weight" (N(0, 1/fan_in)), "norm_weight" (near 1), "offset_norm_weight" (near 0, for
    `x * (1 + w)` norms), "bias", "cos"/"sin" (RoPE tables; "cos_half"/"sin_half" for half-width tables),
    "inv_freq" (RoPE's inverse frequencies), "value" (exactly `value`), "positions" (0, 1, ... along the last axis), "token_ids" (in [0, high)), "expert_ids" (distinct per row, in [0, high)), "routing_weights"
    (positive, rows sum to 1).
    """

    name: str
    shape: tuple[str, ...] | None
    dtype: str
    description: str
    init: str = "randn"
    fan_in: str | None = None  # axis whose size scales a weight
    high: str | None = None  # axis bounding ids
    value: str | None = None  # init "value": a Python literal of the values (a buffer computed from the config)

    def to_dict(self) -> dict:
        return {"shape": None if self.shape is None else list(self.shape), "dtype": self.dtype,
                "description": self.description}


@dataclass
class Check:
    """How to compare the reference with the transformers module it was extracted from.

    module: "layer:<path>" (inside the layer kind), "embed", "head" or "model:<path>".
    params: reference input name -> parameter path under that module (copied from the module).
    call: runs the module on the other inputs and returns the expected outputs by name.
    axes: small values for the var axes (CPU-sized).
    """

    module: str
    params: dict[str, str]
    call: Callable[[Any, dict[str, Any]], dict[str, Any]]
    axes: dict[str, int]
    sort_ids: tuple[str, str] | None = None  # (ids output, weights output) compared as sets per row


@dataclass
class Draft:
    name: str
    op_type: str
    description: str
    axes: dict[str, tuple]  # name -> ("const", value, description) or ("var", description)
    inputs: list[Arg]
    outputs: list[Arg]
    code: str  # helpers and `run`, using torch / F / math
    shapes: str  # workload shape set (see workloads.py)
    dtype: str = "bfloat16"
    tolerance_scale: float = 1.0
    check: Check | None = field(default=None, compare=False)
    hints: dict[str, Any] = field(default_factory=dict)
    # generic drafts: the workloads' axis values, listed (instead of a named shape set); None = `shapes`
    workload_points: list[dict[str, int]] | None = None
    versions: dict[str, str] = field(default_factory=dict)  # libraries beyond transformers (diffusers, ...)
    # generic drafts: the var axes at each capture point (0 traced, 1.. validated); not part of the problem
    capture_points: list[dict[str, int]] | None = field(default=None, compare=False)

    def const(self, axis: str) -> int:
        return self.axes[axis][1]

    def reference(self) -> str:
        imports = ["import torch"]
        if "math." in self.code:
            imports.insert(0, "import math")
        if "F." in self.code:
            imports.append("import torch.nn.functional as F")
        header = (f"# solbench: problem={self.name}\n"
                  f'"""{self.description}\n\nExtracted by `solbench extract`; edit the extractor, not this file."""\n')
        return "\n".join([header, *imports, "", "", self.get_inputs_source(), "", "", self.code.strip(), ""])

    def definition(self, provenance: dict[str, Any]) -> dict[str, Any]:
        axes: dict[str, Any] = {}
        for name, spec in self.axes.items():
            if spec[0] == "const":
                axes[name] = {"type": "const", "value": spec[1], "description": spec[2]}
            elif spec[0] == "expr":
                axes[name] = {"type": "expr", "expression": spec[1], "description": spec[2]}
            else:
                axes[name] = {"type": "var", "description": spec[1]}
        out: dict[str, Any] = {
            "name": self.name,
            "op_type": self.op_type,
            "hf_id": provenance["models"][0]["hf_id"],
            "description": self.description,
            "axes": axes,
            "custom_inputs_entrypoint": "get_inputs",
            "inputs": {a.name: a.to_dict() for a in self.inputs},
            "outputs": {a.name: a.to_dict() for a in self.outputs},
            "reference": self.reference(),
            "solbench": provenance | ({"hints": self.hints} if self.hints else {}),
        }
        return out

    # -- get_inputs ------------------------------------------------------------------------------

    def get_inputs_source(self, only: set[str] | None = None, name: str = "get_inputs") -> str:
        """The problem's `get_inputs`; with `only`, a function `name` that draws just those inputs (a RoPE
        pair whole): validation takes the weights from the module's copy, and drawing them again for every
        size cost as much as the comparison."""
        lines = [
            f"def {name}(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:",
            '    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, '
            'valid indices."""',
            "    a = axes_and_scalars",
            "    inputs = {}",
        ]
        done: set[str] = set()
        by_name = {arg.name: arg for arg in self.inputs}
        for arg in self.inputs:
            if arg.name in done or (only is not None and arg.name not in only):
                continue
            if arg.init in ("cos", "sin", "cos_half", "sin_half"):
                lines += _rope_lines(arg, by_name)
                done |= {n for n in by_name if by_name[n].init in ("cos", "sin", "cos_half", "sin_half")}
                continue
            lines.append(f'    inputs["{arg.name}"] = {_init_expr(arg)}')
            done.add(arg.name)
        lines.append("    return inputs")
        return "\n".join(lines)


def _dims(shape: tuple[str, ...]) -> str:
    """The sizes as call arguments; `()` for a 0-d tensor (Gemma 3n's scalar router scale)."""
    parts = [s if s.isdigit() else f'a["{s}"]' for s in shape]
    return ", ".join(parts) or "()"


def _tuple(shape: tuple[str, ...]) -> str:
    return f"({_dims(shape)},)" if shape else "()"


def _init_expr(arg: Arg) -> str:
    dt = TORCH_DTYPES[arg.dtype]
    dims = _dims(arg.shape)
    if arg.init == "randn":
        return f"torch.randn({dims}, dtype={dt}, device=device)"
    if arg.init == "positions":  # 0, 1, 2, ... along the last axis, in every row
        last = arg.shape[-1] if arg.shape[-1].isdigit() else f'a["{arg.shape[-1]}"]'
        return f"torch.arange({last}, device=device).expand({dims}).contiguous().to({dt})"
    if arg.init == "value":
        return f"torch.tensor({arg.value}, dtype={dt}, device=device)"
    if arg.init == "weight":
        fan_in = arg.fan_in if arg.fan_in.isdigit() else f'a["{arg.fan_in}"]'
        return f"torch.randn({dims}, dtype={dt}, device=device).mul_({fan_in} ** -0.5)"
    if arg.init == "norm_weight":
        return f"(1.0 + 0.1 * torch.randn({dims}, device=device)).to({dt})"
    if arg.init == "offset_norm_weight":
        return f"(0.1 * torch.randn({dims}, device=device)).to({dt})"
    if arg.init in ("zeros", "ones"):
        return f"torch.{arg.init}({_tuple(arg.shape)}, dtype={dt}, device=device)"
    if arg.init == "bias":
        return f"(0.1 * torch.randn({dims}, device=device)).to({dt})"
    if arg.init == "token_ids":
        return f'torch.randint(0, a["{arg.high}"], {_tuple(arg.shape)}, dtype={dt}, device=device)'
    if arg.init == "expert_ids":
        rows = _dims(arg.shape[:-1])
        return (f'torch.rand({rows}, a["{arg.high}"], device=device).argsort(dim=-1)'
                f'[..., : a["{arg.shape[-1]}"]].to({dt})')
    if arg.init == "inv_freq":  # RoPE's 1 / 10000^(2i/d) for i < d/2, d/2 entries (one vector)
        return f"(10000.0 ** -(torch.arange({dims}, device=device).float() / {dims})).to({dt})"
    if arg.init == "routing_weights":
        return (f"torch.softmax(torch.randn({dims}, device=device), dim=-1).to({dt})")
    raise ValueError(f"unknown init {arg.init!r} for {arg.name}")


def _rope_lines(arg: Arg, by_name: dict[str, Arg]) -> list[str]:
    """cos/sin tables of real RoPE angles at random positions (so cos^2 + sin^2 = 1)."""
    shape = arg.shape
    half = arg.init.endswith("_half")
    prefix = _dims(shape[:-1])
    dim = f'a["{shape[-1]}"]' if not shape[-1].isdigit() else shape[-1]
    rot = f"2 * {dim}" if half else dim
    cos_name = next(n for n, a in by_name.items() if a.init.startswith("cos"))
    sin_name = next(n for n, a in by_name.items() if a.init.startswith("sin"))
    dt = TORCH_DTYPES[arg.dtype]
    lines = [
        f"    positions = torch.randint(0, 8192, ({prefix},), device=device).float()",
        f"    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, {rot}, 2, device=device).float() / ({rot})))",
        "    angles = positions[..., None] * inv_freq",
    ]
    if not half:
        lines.append("    angles = torch.cat((angles, angles), dim=-1)")
    lines += [f'    inputs["{cos_name}"] = angles.cos().to({dt})',
              f'    inputs["{sin_name}"] = angles.sin().to({dt})']
    return lines


def fmt_float(value: float) -> str:
    """A short, stable spelling of a float for text (1e-06 -> 1e-06, 0.125 -> 0.125)."""
    return f"{value:g}"


def name_float(value: float) -> str:
    """A float inside a problem name: no dots, so names stay plain file and folder names (2.5 -> 2p5)."""
    return fmt_float(value).replace(".", "p")
