"""Feed-forward blocks: gated (SwiGLU, GeGLU, with separate or fused gate/up weights) and plain MLPs."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from solbench.extract.draft import Arg, Check, Draft
from solbench.spec.errors import SpecError

ACTIVATIONS = {  # name -> (source applied to `x`, callable)
    "silu": ("F.silu({x})", F.silu),
    "gelu_tanh": ('F.gelu({x}, approximate="tanh")', lambda x: F.gelu(x, approximate="tanh")),
    "gelu": ("F.gelu({x})", F.gelu),
    "relu": ("F.relu({x})", F.relu),
}
GATED_NAMES = {"silu": "swiglu", "gelu_tanh": "geglu_tanh", "gelu": "geglu", "relu": "reglu"}


@dataclass(frozen=True)
class MlpInfo:
    hidden: int
    intermediate: int
    activation: str
    gated: bool
    fused: bool  # one gate_up weight (gate rows first)
    bias: bool

    @property
    def name(self) -> str:
        base = f"{GATED_NAMES[self.activation]}_mlp" if self.gated else f"{self.activation}_mlp"
        parts = [base, f"h{self.hidden}", f"i{self.intermediate}"]
        if self.fused:
            parts.insert(1, "gateupfused")
        if self.bias:
            parts.append("bias")
        return "_".join(parts)

    def act(self, x: str) -> str:
        return ACTIVATIONS[self.activation][0].format(x=x)


def is_mlp(module: nn.Module) -> bool:
    return (hasattr(module, "down_proj") and (hasattr(module, "gate_proj") or hasattr(module, "gate_up_proj"))) \
        or (hasattr(module, "fc1") and hasattr(module, "fc2"))


def activation_of(fn: nn.Module) -> str:
    """Name the activation by running it against the candidates (bit-exact on a probe)."""
    x = torch.linspace(-6, 6, 257)
    for name, (_, ref) in ACTIVATIONS.items():
        if torch.equal(fn(x), ref(x)):
            return name
    raise SpecError(f"unknown activation {type(fn).__name__}")


def mlp_info(module: nn.Module) -> MlpInfo:
    sparsity = getattr(module, "activation_sparsity", 0.0)
    if isinstance(sparsity, (int, float)) and sparsity > 0:  # Gemma 3n's first layers: a cut on the gate
        raise SpecError(f"{type(module).__name__}: activation sparsity {sparsity} (a Gaussian top-k cut of the gate "
                        "before its activation) is not in the MLP template")
    act = getattr(module, "act_fn", None) or getattr(module, "activation_fn", None) or getattr(module, "act", None)
    if act is None:
        raise SpecError(f"{type(module).__name__}: no activation found")
    activation = activation_of(copy.deepcopy(act).to_empty(device="cpu") if isinstance(act, nn.Module) else act)
    if hasattr(module, "fc1"):
        return MlpInfo(module.fc1.in_features, module.fc1.out_features, activation, False, False,
                       module.fc1.bias is not None)
    if hasattr(module, "gate_up_proj"):
        return MlpInfo(module.gate_up_proj.in_features, module.down_proj.in_features, activation, True, True,
                       module.gate_up_proj.bias is not None)
    return MlpInfo(module.gate_proj.in_features, module.gate_proj.out_features, activation, True, False,
                   module.gate_proj.bias is not None)


def weights(info: MlpInfo, dtype: str, prefix: str = "", width: str = "intermediate_size"
            ) -> tuple[list[Arg], dict[str, str]]:
    """Weights (reference input -> parameter path); `width` names the axis of the intermediate size."""
    p = prefix
    args: list[Arg] = []
    params: dict[str, str] = {}

    def add(name, shape, desc, path, fan_in, bias_shape=None):
        args.append(Arg(p + name + "_weight", shape, dtype, desc, init="weight", fan_in=fan_in))
        params[p + name + "_weight"] = path + ".weight"
        if info.bias:
            args.append(Arg(p + name + "_bias", bias_shape, dtype, desc + " bias", init="bias"))
            params[p + name + "_bias"] = path + ".bias"

    if not info.gated:
        add("fc1", (width, "hidden_size"), "Up projection", "fc1", "hidden_size", (width,))
        add("fc2", ("hidden_size", width), "Down projection", "fc2", width, ("hidden_size",))
    elif info.fused:
        add("gate_up", (str(2 * info.intermediate), "hidden_size"), "Fused gate and up projections (gate rows first)",
            "gate_up_proj", "hidden_size", (str(2 * info.intermediate),))
        add("down", ("hidden_size", width), "Down projection", "down_proj", width,
            ("hidden_size",))
    else:
        add("gate", (width, "hidden_size"), "Gate projection", "gate_proj", "hidden_size",
            (width,))
        add("up", (width, "hidden_size"), "Up projection", "up_proj", "hidden_size", (width,))
        add("down", ("hidden_size", width), "Down projection", "down_proj", width,
            ("hidden_size",))
    return args, params


def helper(info: MlpInfo, name: str = "mlp") -> str:
    """`def mlp(x, <weights>)`: the block as a function (used by standalone and layer problems)."""
    w, _ = weights(info, "bfloat16")
    sig = ", ".join(["x"] + [a.name for a in w])
    def b(n):
        return (f", {n}_bias" if info.bias else "")
    if not info.gated:
        body = [f"h = F.linear(x, fc1_weight{b('fc1')})", f"return F.linear({info.act('h')}, fc2_weight{b('fc2')})"]
        doc = "Two-layer MLP"
    elif info.fused:
        body = [f"gate, up = F.linear(x, gate_up_weight{b('gate_up')}).chunk(2, dim=-1)",
                f"return F.linear(up * {info.act('gate')}, down_weight{b('down')})"]
        doc = "Gated MLP with one fused gate/up projection"
    else:
        body = [f"gate = F.linear(x, gate_weight{b('gate')})", f"up = F.linear(x, up_weight{b('up')})",
                f"return F.linear({info.act('gate')} * up, down_weight{b('down')})"]
        doc = "Gated MLP: down(act(gate(x)) * up(x))"
    return f'def {name}({sig}):\n    """{doc}."""\n' + "\n".join("    " + line for line in body)


def mlp_draft(info: MlpInfo, module_ref: str, dtype: str = "bfloat16") -> Draft:
    w, params = weights(info, dtype)
    names = ", ".join(["hidden_states"] + [a.name for a in w])
    code = f'''{helper(info)}


@torch.no_grad()
def run({names}):
    """hidden_states: [num_tokens, hidden] -> [num_tokens, hidden]."""
    return mlp({names})
'''
    kind = f"{GATED_NAMES[info.activation]} gated MLP" if info.gated else f"{info.activation} MLP"
    return Draft(
        name=info.name, op_type="mlp",
        description=f"{kind} (hidden {info.hidden}, intermediate {info.intermediate}"
                    f"{', fused gate/up weight' if info.fused else ''}{', with biases' if info.bias else ''}).",
        axes={"num_tokens": ("var", "Tokens (batch x sequence, flattened)"),
              "hidden_size": ("const", info.hidden, "Model width"),
              "intermediate_size": ("const", info.intermediate, "MLP width")},
        inputs=[Arg("hidden_states", ("num_tokens", "hidden_size"), dtype, "Input activations"), *w],
        outputs=[Arg("output", ("num_tokens", "hidden_size"), dtype, "MLP output")],
        code=code, shapes="tokens",
        check=Check(module_ref, params, lambda m, inp: {"output": _first(m(inp["hidden_states"]))}, {"num_tokens": 7}),
    )


def _first(out):
    return out[0] if isinstance(out, tuple) else out


# d act(g) / dg in float32, for the gated backward references (`g` is the gate pre-activation in float32)
ACTIVATION_GRADS = {
    "silu": ["sig = torch.sigmoid(g)", "d_act = sig * (1 + g * (1 - sig))"],
    "gelu_tanh": ["t = torch.tanh(0.7978845608028654 * (g + 0.044715 * g ** 3))  # sqrt(2 / pi)",
                  "d_act = 0.5 * (1 + t) + 0.5 * g * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * g * g)"],
    "gelu": ["d_act = 0.5 * (1 + torch.erf(g * 0.7071067811865476)) + g * torch.exp(-0.5 * g * g) * 0.3989422804014327"],
}


def _fused_backward_source(act: str, grads: str) -> str:
    """The reference of a gated MLP's backward with one gate/up weight (gate rows first)."""
    return f'''@torch.no_grad()
def run(hidden_states, gate_up_weight, down_weight, grad_output):
    """Gradients of down(act(gate) * up), where gate, up = chunk(gate_up(x), 2), with respect to x and both weights.

    hidden_states, grad_output: [num_tokens, hidden]; gate_up_weight: [2 * intermediate, hidden] (gate rows first).
    The forward is recomputed (activation checkpointing); the activation's derivative is taken in float32."""
    x = hidden_states
    gate, up = F.linear(x, gate_up_weight).chunk(2, dim=-1)
    act = {act}
    h = act * up
    grad_down_weight = grad_output.t() @ h
    grad_h = grad_output @ down_weight
    grad_up = grad_h * act
    g = gate.float()
{grads}
    grad_gate = (grad_h.float() * up.float() * d_act).to(x.dtype)
    grad_gate_up = torch.cat((grad_gate, grad_up), dim=-1)
    grad_gate_up_weight = grad_gate_up.t() @ x
    grad_hidden_states = grad_gate_up @ gate_up_weight
    return grad_hidden_states, grad_gate_up_weight, grad_down_weight
'''


def _split_backward_source(act: str, grads: str) -> str:
    """The reference of a gated MLP's backward with separate gate and up weights."""
    return f'''@torch.no_grad()
def run(hidden_states, gate_weight, up_weight, down_weight, grad_output):
    """Gradients of down(act(gate(x)) * up(x)) with respect to x and the three weights.

    hidden_states, grad_output: [num_tokens, hidden]. The forward is recomputed (activation checkpointing); the
    activation's derivative is taken in float32."""
    x = hidden_states
    gate = F.linear(x, gate_weight)
    up = F.linear(x, up_weight)
    act = {act}
    h = act * up
    grad_down_weight = grad_output.t() @ h
    grad_h = grad_output @ down_weight
    grad_up = grad_h * act
    g = gate.float()
{grads}
    grad_gate = (grad_h.float() * up.float() * d_act).to(x.dtype)
    grad_gate_weight = grad_gate.t() @ x
    grad_up_weight = grad_up.t() @ x
    grad_hidden_states = grad_gate @ gate_weight + grad_up @ up_weight
    return grad_hidden_states, grad_gate_weight, grad_up_weight, grad_down_weight
'''


def mlp_backward_draft(info: MlpInfo, module_ref: str, dtype: str = "bfloat16") -> Draft | None:
    """Backward of a gated MLP without biases (SwiGLU, GeGLU; separate or fused gate/up weights)."""
    if not info.gated or info.bias or info.activation not in ACTIVATION_GRADS:
        return None
    if info.activation == "silu" and not info.fused:
        return _swiglu_backward_draft(info, module_ref, dtype)
    w, params = weights(info, dtype)
    act_name = GATED_NAMES[info.activation]
    act = info.act("gate")
    grads = "\n".join("    " + line for line in ACTIVATION_GRADS[info.activation])
    if info.fused:
        code = _fused_backward_source(act, grads)
        names = ["grad_hidden_states", "grad_gate_up_weight", "grad_down_weight"]
        paths = ["gate_up_proj.weight", "down_proj.weight"]
        weight_outputs = [Arg("grad_gate_up_weight", (str(2 * info.intermediate), "hidden_size"), dtype,
                              "Gradient of gate_up_weight")]
        name = f"{act_name}_mlp_gateupfused_backward_h{info.hidden}_i{info.intermediate}"
    else:
        code = _split_backward_source(act, grads)
        names = ["grad_hidden_states", "grad_gate_weight", "grad_up_weight", "grad_down_weight"]
        paths = ["gate_proj.weight", "up_proj.weight", "down_proj.weight"]
        weight_outputs = [Arg("grad_gate_weight", ("intermediate_size", "hidden_size"), dtype, "Gradient of gate_weight"),
                          Arg("grad_up_weight", ("intermediate_size", "hidden_size"), dtype, "Gradient of up_weight")]
        name = f"{act_name}_mlp_backward_h{info.hidden}_i{info.intermediate}"
    kind = f"{act_name} gated MLP" + (" with a fused gate/up weight" if info.fused else "")
    return Draft(
        name=name, op_type="mlp_backward",
        description=f"Backward of a {kind} (hidden {info.hidden}, intermediate {info.intermediate}): gradients for "
                    f"the input and every weight, recomputing the forward.",
        axes={"num_tokens": ("var", "Tokens in the micro-batch"),
              "hidden_size": ("const", info.hidden, "Model width"),
              "intermediate_size": ("const", info.intermediate, "MLP width")},
        inputs=[Arg("hidden_states", ("num_tokens", "hidden_size"), dtype, "Forward input"), *w,
                Arg("grad_output", ("num_tokens", "hidden_size"), dtype, "Gradient of the MLP output")],
        outputs=[Arg("grad_hidden_states", ("num_tokens", "hidden_size"), dtype, "Gradient of the input"),
                 *weight_outputs,
                 Arg("grad_down_weight", ("hidden_size", "intermediate_size"), dtype, "Gradient of down_weight")],
        code=code, shapes="train_tokens", tolerance_scale=2.0,
        check=Check(module_ref, params, _autograd_call(paths, names), {"num_tokens": 7}),
    )


def _autograd_call(paths: list[str], names: list[str]):
    """Gradients of the module's output for the input and the parameters at `paths`, by autograd."""
    def call(m, inp):
        x = inp["hidden_states"].detach().clone().requires_grad_(True)
        params_ = [m.get_parameter(p) for p in paths]
        with torch.enable_grad():
            for p in params_:
                p.requires_grad_(True)
            out = _first(m(x))
            grads = torch.autograd.grad(out, [x, *params_], inp["grad_output"])
        return dict(zip(names, grads))
    return call


def _swiglu_backward_draft(info: MlpInfo, module_ref: str, dtype: str) -> Draft:
    w, params = weights(info, dtype)
    code = '''@torch.no_grad()
def run(hidden_states, gate_weight, up_weight, down_weight, grad_output):
    """Gradients of down(silu(gate(x)) * up(x)) with respect to x and the three weights.

    hidden_states, grad_output: [num_tokens, hidden]. The forward is recomputed (activation checkpointing)."""
    x = hidden_states
    gate = F.linear(x, gate_weight)
    up = F.linear(x, up_weight)
    act = F.silu(gate)
    h = act * up
    grad_down_weight = grad_output.t() @ h
    grad_h = grad_output @ down_weight
    grad_up = grad_h * act
    sig = torch.sigmoid(gate.float())
    grad_gate = (grad_h.float() * up.float() * sig * (1 + gate.float() * (1 - sig))).to(x.dtype)
    grad_gate_weight = grad_gate.t() @ x
    grad_up_weight = grad_up.t() @ x
    grad_hidden_states = grad_gate @ gate_weight + grad_up @ up_weight
    return grad_hidden_states, grad_gate_weight, grad_up_weight, grad_down_weight
'''

    def call(m, inp):
        x = inp["hidden_states"].detach().clone().requires_grad_(True)
        params_ = [m.gate_proj.weight, m.up_proj.weight, m.down_proj.weight]
        with torch.enable_grad():
            for p in params_:
                p.requires_grad_(True)
            out = m(x)
            grads = torch.autograd.grad(out, [x, *params_], inp["grad_output"])
        return dict(zip(["grad_hidden_states", "grad_gate_weight", "grad_up_weight", "grad_down_weight"], grads))

    return Draft(
        name=f"swiglu_mlp_backward_h{info.hidden}_i{info.intermediate}", op_type="mlp_backward",
        description=f"Backward of a SwiGLU MLP (hidden {info.hidden}, intermediate {info.intermediate}): gradients "
                    f"for the input and the gate, up and down weights, recomputing the forward.",
        axes={"num_tokens": ("var", "Tokens in the micro-batch"),
              "hidden_size": ("const", info.hidden, "Model width"),
              "intermediate_size": ("const", info.intermediate, "MLP width")},
        inputs=[Arg("hidden_states", ("num_tokens", "hidden_size"), dtype, "Forward input"), *w,
                Arg("grad_output", ("num_tokens", "hidden_size"), dtype, "Gradient of the MLP output")],
        outputs=[Arg("grad_hidden_states", ("num_tokens", "hidden_size"), dtype, "Gradient of the input"),
                 Arg("grad_gate_weight", ("intermediate_size", "hidden_size"), dtype, "Gradient of gate_weight"),
                 Arg("grad_up_weight", ("intermediate_size", "hidden_size"), dtype, "Gradient of up_weight"),
                 Arg("grad_down_weight", ("hidden_size", "intermediate_size"), dtype, "Gradient of down_weight")],
        code=code, shapes="train_tokens", tolerance_scale=2.0,
        check=Check(module_ref, params, call, {"num_tokens": 7}),
    )
