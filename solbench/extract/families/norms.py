"""Normalisation layers: RMSNorm in its three numerical conventions, and LayerNorm.

Which convention a model uses is not read from its class name: the module is run on a small CPU
input and the candidate that reproduces it bit for bit (in bf16 and fp32) is chosen.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn

from solbench.extract.draft import Arg, Check, Draft, fmt_float, name_float
from solbench.spec.errors import SpecError

# The helper each style contributes to a reference; every style is called `norm(x, weight, eps)`.
HELPERS = {
    "rms": '''def rms_norm(x, weight, eps):
    """RMSNorm: normalise in float32, cast back to the input dtype, then scale."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)''',
    "rms_fp32mul": '''def rms_norm(x, weight, eps):
    """RMSNorm: normalise and scale in float32, then cast back to the input dtype."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (weight * h).to(x.dtype)''',
    "rms_oneplus": '''def rms_norm(x, weight, eps):
    """RMSNorm with a zero-centred weight: scale by (1 + weight) in float32, then cast back."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (h * (1.0 + weight.float())).to(x.dtype)''',
}
LAYER_NORM_HELPER = '''def layer_norm(x, weight, bias, eps):
    """LayerNorm over the last dimension."""
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)'''

NAME_PART = {"rms": "rmsnorm", "rms_fp32mul": "rmsnorm_fp32mul", "rms_oneplus": "rmsnorm_oneplus",
             "layernorm": "layernorm"}
WEIGHT_INIT = {"rms": "norm_weight", "rms_fp32mul": "norm_weight", "rms_oneplus": "offset_norm_weight",
               "layernorm": "norm_weight"}


@dataclass(frozen=True)
class NormInfo:
    style: str  # a key of HELPERS, or "layernorm"
    size: int
    eps: float

    @property
    def helper(self) -> str:
        return LAYER_NORM_HELPER if self.style == "layernorm" else HELPERS[self.style]

    def call(self, x: str, weight: str, bias: str | None = None) -> str:
        """Source text applying this norm."""
        if self.style == "layernorm":
            return f"layer_norm({x}, {weight}, {bias}, {fmt_float(self.eps)})"
        return f"rms_norm({x}, {weight}, {fmt_float(self.eps)})"


def is_norm(module: nn.Module) -> bool:
    if isinstance(module, nn.LayerNorm):
        return True
    return type(module).__name__.endswith("RMSNorm") and hasattr(module, "weight")


def norm_eps(module: nn.Module) -> float:
    for attr in ("variance_epsilon", "eps", "epsilon"):
        value = getattr(module, attr, None)
        if isinstance(value, float):
            return value
    raise SpecError(f"cannot find the epsilon of {type(module).__name__}")


_STYLE_CACHE: dict[tuple, str] = {}


def norm_info(module: nn.Module) -> NormInfo:
    """Identify a norm module's convention by running it (cached per class and size)."""
    size = module.weight.shape[0]
    eps = norm_eps(module)
    if isinstance(module, nn.LayerNorm):
        if module.bias is None:
            raise SpecError("LayerNorm without bias is not supported yet")
        return NormInfo("layernorm", size, eps)
    key = (type(module), size, eps)
    if key not in _STYLE_CACHE:
        _STYLE_CACHE[key] = _probe_style(module)
    return NormInfo(_STYLE_CACHE[key], size, eps)


def _probe_style(module: nn.Module) -> str:
    gen = torch.Generator().manual_seed(0)
    probe = copy.deepcopy(module).to_empty(device="cpu")
    size = probe.weight.shape[0]
    weight = 0.1 * torch.randn(size, generator=gen) + torch.randint(0, 2, (1,), generator=gen).float()
    x = torch.randn(4, size, generator=gen) * 3
    for style, source in HELPERS.items():
        namespace: dict = {"torch": torch}
        exec(compile(source, "<norm>", "exec"), namespace)
        ok = True
        for dtype in (torch.bfloat16, torch.float32):
            probe = probe.to(dtype)
            with torch.no_grad():
                probe.weight.copy_(weight)
                want = probe(x.to(dtype))
            got = namespace["rms_norm"](x.to(dtype), probe.weight.detach(), norm_eps(module))
            ok = ok and want.dtype == got.dtype and torch.equal(want, got)
        if ok:
            return style
    raise SpecError(f"{type(module).__name__} matches none of the known RMSNorm conventions")


def norm_draft(info: NormInfo, module_ref: str, dtype: str = "bfloat16") -> Draft:
    """A standalone norm over a flat token axis."""
    eps = fmt_float(info.eps)
    name = f"{NAME_PART[info.style]}_h{info.size}_eps{name_float(info.eps)}"
    inputs = [Arg("hidden_states", ("num_tokens", "hidden_size"), dtype, "Activations to normalise"),
              Arg("weight", ("hidden_size",), dtype, "Norm scale", init=WEIGHT_INIT[info.style])]
    params = {"weight": "weight"}
    if info.style == "layernorm":
        inputs.append(Arg("bias", ("hidden_size",), dtype, "Norm shift", init="bias"))
        params["bias"] = "bias"
        body = "return layer_norm(hidden_states, weight, bias, EPS)"
        signature = "hidden_states, weight, bias"
    else:
        body = "return rms_norm(hidden_states, weight, EPS)"
        signature = "hidden_states, weight"
    code = f'''EPS = {eps}


{info.helper}


@torch.no_grad()
def run({signature}):
    {body}
'''
    kind = {"rms": "RMSNorm (x cast back to the input dtype before scaling)",
            "rms_fp32mul": "RMSNorm (scaled in float32, then cast)",
            "rms_oneplus": "RMSNorm with a zero-centred weight, output = x_hat * (1 + weight)",
            "layernorm": "LayerNorm with weight and bias"}[info.style]
    return Draft(
        name=name, op_type="norm",
        description=f"{kind} over hidden size {info.size}, eps {eps}.",
        axes={"num_tokens": ("var", "Tokens (batch x sequence, flattened)"),
              "hidden_size": ("const", info.size, "Normalised dimension")},
        inputs=inputs,
        outputs=[Arg("output", ("num_tokens", "hidden_size"), dtype, "Normalised activations")],
        code=code, shapes="tokens",
        check=Check(module_ref, params, lambda m, inp: {"output": m(inp["hidden_states"])}, {"num_tokens": 7}),
    )


def norm_backward_draft(info: NormInfo, module_ref: str, dtype: str = "bfloat16") -> Draft | None:
    """Backward of the common RMSNorm (the forward is recomputed from the saved input)."""
    if info.style != "rms":
        return None
    eps = fmt_float(info.eps)
    code = f'''EPS = {eps}


@torch.no_grad()
def run(hidden_states, weight, grad_output):
    """Gradients of weight * (x * rsqrt(mean(x^2) + EPS)).to(dtype) for x and weight.

    hidden_states, grad_output: [num_tokens, hidden]; weight: [hidden]."""
    x = hidden_states.float()
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
    x_hat = x * rstd
    grad = grad_output.float()
    grad_weight = (grad * x_hat.to(hidden_states.dtype).float()).sum(dim=0)
    grad_x_hat = grad * weight.float()
    grad_x = rstd * (grad_x_hat - x_hat * (grad_x_hat * x_hat).mean(-1, keepdim=True))
    return grad_x.to(hidden_states.dtype), grad_weight.to(weight.dtype)
'''

    def call(m, inp):
        x = inp["hidden_states"].detach().clone().requires_grad_(True)
        with torch.enable_grad():
            m.weight.requires_grad_(True)
            grads = torch.autograd.grad(m(x), [x, m.weight], inp["grad_output"])
        return {"grad_hidden_states": grads[0], "grad_weight": grads[1]}

    return Draft(
        name=f"rmsnorm_backward_h{info.size}_eps{name_float(info.eps)}", op_type="norm_backward",
        description=f"Backward of RMSNorm over hidden size {info.size} (eps {eps}): gradients for the input and "
                    f"the weight; the normalisation statistics are recomputed.",
        axes={"num_tokens": ("var", "Tokens in the micro-batch"),
              "hidden_size": ("const", info.size, "Normalised dimension")},
        inputs=[Arg("hidden_states", ("num_tokens", "hidden_size"), dtype, "Forward input"),
                Arg("weight", ("hidden_size",), dtype, "Norm scale", init="norm_weight"),
                Arg("grad_output", ("num_tokens", "hidden_size"), dtype, "Gradient of the norm output")],
        outputs=[Arg("grad_hidden_states", ("num_tokens", "hidden_size"), dtype, "Gradient of the input"),
                 Arg("grad_weight", ("hidden_size",), dtype, "Gradient of the weight")],
        code=code, shapes="train_tokens", tolerance_scale=2.0,
        check=Check(module_ref, {"weight": "weight"}, call, {"num_tokens": 7}),
    )
