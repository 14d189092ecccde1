"""Mixture-of-experts: the router (three conventions) and the routed experts.

Expert references loop over the experts some token selected, so only touched experts are read; the
definition records that in a `hints.moe` entry for the speed-of-light analyser. Routing and dispatch are
spelled as transformers' modules spell them (a one-hot mask of the selections, the unpicked groups masked with
`~mask`): a kernel author reads the module's algorithm, and the analyser's one-hot rule traces the loop at
every size.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass

import torch
from torch import nn

from solbench.extract.draft import Arg, Check, Draft, fmt_float, name_float
from solbench.extract.families.mlp import ACTIVATIONS, GATED_NAMES, activation_of
from solbench.spec.errors import SpecError


@dataclass(frozen=True)
class RouterInfo:
    style: str  # "softmax_topk", "sigmoid_grouped", "topk_softmax"
    hidden: int
    experts: int
    top_k: int
    normalize: bool
    weights_dtype: str  # dtype of the returned routing weights
    groups: int = 1
    topk_groups: int = 1
    scaling: float = 1.0
    fp32_logits: bool = False  # the router projection runs in float32 (DeepSeek)
    # the selection bias is a buffer of the MoE block, passed to the router's forward (MiniMax-M2); the
    # router's parameter paths are then relative to the block
    bias_on_block: bool = False

    @property
    def name(self) -> str:
        base = f"moe_router_{self.style}_e{self.experts}_k{self.top_k}"
        if self.style == "sigmoid_grouped":
            base += f"_g{self.groups}_tg{self.topk_groups}"
        base += f"_h{self.hidden}"
        if self.normalize and self.style != "topk_softmax":
            base += "_renorm"
        if self.scaling != 1.0:
            base += f"_scale{name_float(self.scaling)}"
        if self.style == "softmax_topk" and self.fp32_logits:
            base += "_f32logits"
        elif self.style == "softmax_topk" and self.weights_dtype == "float32":
            base += "_f32weights"
        if self.style == "sigmoid_grouped" and not self.fp32_logits:
            base += "_wlogits"  # logits in the weights' dtype, then float32
        return base


@dataclass(frozen=True)
class ExpertsInfo:
    style: str  # "gated" ([E, 2I, H] gate rows first) or "gptoss" ([E, H, 2I] interleaved, clamped, biased)
    hidden: int
    intermediate: int
    experts: int
    top_k: int
    activation: str
    weights_dtype: str
    alpha: float = 0.0
    limit: float = 0.0

    @property
    def name(self) -> str:
        if self.style == "gptoss":
            base = f"moe_experts_clamped_swiglu_bias_e{self.experts}_k{self.top_k}"
        else:
            base = f"moe_experts_{GATED_NAMES[self.activation]}_e{self.experts}_k{self.top_k}"
        base += f"_h{self.hidden}_i{self.intermediate}"
        if self.weights_dtype == "float32":
            base += "_f32weights"
        return base


def is_moe(module: nn.Module) -> bool:
    return hasattr(module, "experts") and (hasattr(module, "gate") or hasattr(module, "router"))


def router_of(module: nn.Module) -> nn.Module:
    return module.gate if hasattr(module, "gate") else module.router


def _probe_router(router: nn.Module, hidden: int, block_bias: torch.Tensor | None = None):
    """Run a CPU copy of the router; a router that takes its block's selection bias gets one."""
    probe = copy.deepcopy(router).to_empty(device="cpu").to(torch.bfloat16)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in probe.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
        for b in probe.buffers():
            b.copy_(torch.randn(b.shape, generator=gen) * 0.1)
        x = torch.randn(5, hidden, generator=gen).to(torch.bfloat16)
        if block_bias is not None:
            return probe(x, torch.randn(block_bias.shape, generator=gen).to(block_bias.dtype) * 0.1)
        return probe(x)


def _block_bias(module: nn.Module, router: nn.Module) -> torch.Tensor | None:
    """The MoE block's selection-bias buffer when the router's forward takes it as an argument."""
    params = inspect.signature(router.forward).parameters
    bias = getattr(module, "e_score_correction_bias", None)
    return bias if "e_score_correction_bias" in params and isinstance(bias, torch.Tensor) else None


def router_info(module: nn.Module, hf_cfg) -> RouterInfo:
    router = router_of(module)
    experts, hidden = router.weight.shape
    top_k = router.top_k
    block_bias = _block_bias(module, router)
    weights = _probe_router(router, hidden, block_bias)[1]
    wdtype = str(weights.dtype).removeprefix("torch.")
    if block_bias is not None:  # sigmoid scores, biased selection, renormalised, no groups (MiniMax-M2)
        return RouterInfo("sigmoid_grouped", hidden, experts, top_k, True, wdtype, bias_on_block=True)
    if hasattr(router, "e_score_correction_bias"):
        return RouterInfo("sigmoid_grouped", hidden, experts, top_k, bool(router.norm_topk_prob), wdtype,
                          router.num_group, router.topk_group, float(router.routed_scaling_factor),
                          fp32_logits=True)
    if hasattr(router, "topk_method"):
        if router.topk_method != "greedy":
            raise SpecError(f"router top-k method {router.topk_method!r} is not supported yet")
        return RouterInfo("softmax_topk", hidden, experts, top_k, False, wdtype,
                          scaling=float(router.routed_scaling_factor), fp32_logits=True)
    if getattr(router, "bias", None) is not None:
        return RouterInfo("topk_softmax", hidden, experts, top_k, True, wdtype)
    return RouterInfo("softmax_topk", hidden, experts, top_k, bool(getattr(router, "norm_topk_prob", True)), wdtype)


def experts_info(module: nn.Module, router: RouterInfo) -> ExpertsInfo:
    ex = module.experts
    e, a, b = ex.gate_up_proj.shape
    if hasattr(ex, "gate_up_proj_bias"):
        return ExpertsInfo("gptoss", a, b // 2, e, router.top_k, "silu", router.weights_dtype,
                           float(ex.alpha), float(ex.limit))
    act = activation_of(copy.deepcopy(ex.act_fn).to_empty(device="cpu"))
    if a % 2 or ex.down_proj.shape[1] != b:
        raise SpecError(f"{type(ex).__name__}: unexpected expert weight layout {tuple(ex.gate_up_proj.shape)}")
    return ExpertsInfo("gated", b, a // 2, e, router.top_k, act, router.weights_dtype)


# -- sources ------------------------------------------------------------------------------------

def router_constants(info: RouterInfo) -> str:
    lines = [f"TOP_K = {info.top_k}"]
    if info.style == "softmax_topk" and info.scaling != 1.0:
        lines.append(f"ROUTED_SCALING = {info.scaling!r}")
    if info.style == "sigmoid_grouped":
        lines += [f"NUM_GROUPS = {info.groups}", f"TOPK_GROUPS = {info.topk_groups}",
                  f"ROUTED_SCALING = {info.scaling!r}"]
    return "\n".join(lines)


def router_helper(info: RouterInfo) -> str:
    if info.style == "softmax_topk":
        renorm = ("    topk_weights = topk_weights / topk_weights.sum(dim=-1, keepdim=True)\n"
                  if info.normalize else "")
        cast = ".to(logits.dtype)" if info.weights_dtype != "float32" else ""
        scale = " * ROUTED_SCALING" if info.scaling != 1.0 else ""
        logits = ("F.linear(x.float(), router_weight.float())" if info.fp32_logits
                  else "F.linear(x, router_weight)")
        return f'''def route(x, router_weight):
    """Softmax over all experts in float32, keep the TOP_K largest{', renormalised to sum to 1' if info.normalize else ''}.
    Expert ids are sorted by descending weight."""
    logits = {logits}
    probs = torch.softmax(logits.float(), dim=-1)
    topk_weights, topk_ids = torch.topk(probs, TOP_K, dim=-1)
{renorm}    return topk_weights{scale}{cast}, topk_ids'''
    if info.style == "topk_softmax":
        return '''def route(x, router_weight, router_bias):
    """Keep the TOP_K largest logits, then softmax over just those. Expert ids are sorted by descending weight."""
    logits = F.linear(x, router_weight, router_bias)
    top_logits, topk_ids = torch.topk(logits, TOP_K, dim=-1)
    return torch.softmax(top_logits, dim=-1), topk_ids'''
    renorm = ("    topk_weights = topk_weights / (topk_weights.sum(dim=-1, keepdim=True) + 1e-20)\n"
              if info.normalize else "")
    logits = ("F.linear(x.float(), router_weight.float())" if info.fp32_logits
              else "F.linear(x, router_weight).float()")
    return f'''def route(x, router_weight, score_bias):
    """Sigmoid scores; the bias only steers selection. Experts come from the TOPK_GROUPS groups whose two best
    biased scores sum highest. Expert ids are sorted by descending biased score."""
    logits = {logits}
    scores = logits.sigmoid()
    choice = scores + score_bias
    num_experts = router_weight.shape[0]
    per_group = num_experts // NUM_GROUPS
    group_scores = choice.view(-1, NUM_GROUPS, per_group).topk(2, dim=-1).values.sum(dim=-1)
    top_groups = torch.topk(group_scores, TOPK_GROUPS, dim=-1).indices
    group_mask = torch.zeros_like(group_scores).scatter_(1, top_groups, 1.0)
    expert_mask = group_mask.unsqueeze(-1).expand(-1, NUM_GROUPS, per_group).reshape(-1, num_experts)
    choice = choice.masked_fill(~expert_mask.bool(), float("-inf"))
    topk_ids = torch.topk(choice, TOP_K, dim=-1).indices
    topk_weights = scores.gather(1, topk_ids)
{renorm}    return topk_weights * ROUTED_SCALING, topk_ids'''


def router_args(info: RouterInfo, dtype: str, prefix: str = "") -> tuple[list[Arg], dict[str, str]]:
    p = prefix
    args = [Arg(p + "router_weight", ("num_experts", "hidden_size"), dtype, "Router projection", init="weight",
                fan_in="hidden_size")]
    params = {p + "router_weight": "weight"}
    if info.style == "topk_softmax":
        args.append(Arg(p + "router_bias", ("num_experts",), dtype, "Router bias", init="bias"))
        params[p + "router_bias"] = "bias"
    if info.style == "sigmoid_grouped":
        args.append(Arg(p + "score_bias", ("num_experts",), "float32", "Selection-only score correction bias",
                        init="bias"))
        params[p + "score_bias"] = "e_score_correction_bias"
    if info.bias_on_block:
        params[p + "router_weight"] = "gate.weight"
    return args, params


def experts_constants(info: ExpertsInfo) -> str:
    if info.style == "gptoss":
        return f"ALPHA = {info.alpha!r}\nLIMIT = {info.limit!r}"
    return ""


def experts_helper(info: ExpertsInfo) -> str:
    if info.style == "gptoss":
        return '''def experts(x, topk_ids, topk_weights, gate_up_weight, gate_up_bias, down_weight, down_bias):
    """Routed experts with interleaved gate/up columns, clamping and biases; only selected experts run.
    x: [tokens, hidden]; gate_up_weight: [experts, hidden, 2 * intermediate]; down_weight: [experts, intermediate, hidden]."""
    output = torch.zeros_like(x)
    expert_mask = F.one_hot(topk_ids, num_classes=gate_up_weight.shape[0]).permute(2, 1, 0)
    for expert in torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()[:, 0].tolist():
        slot, token_idx = torch.where(expert_mask[expert])
        gate_up = x[token_idx] @ gate_up_weight[expert] + gate_up_bias[expert]
        gate, up = gate_up[..., ::2], gate_up[..., 1::2]
        gate = gate.clamp(max=LIMIT)
        up = up.clamp(min=-LIMIT, max=LIMIT)
        h = (up + 1) * (gate * torch.sigmoid(gate * ALPHA))
        y = h @ down_weight[expert] + down_bias[expert]
        y = y * topk_weights[token_idx, slot, None]
        output.index_add_(0, token_idx, y.to(output.dtype))
    return output'''
    act = ACTIVATIONS[info.activation][0].format(x="gate")
    return f'''def experts(x, topk_ids, topk_weights, gate_up_weight, down_weight):
    """Routed gated experts; only experts some token selected are computed, found as the modules find them
    (a one-hot mask with one class more than experts: the modules' slot for a token routed nowhere).
    x: [tokens, hidden]; gate_up_weight: [experts, 2 * intermediate, hidden] (gate rows first);
    down_weight: [experts, hidden, intermediate]."""
    output = torch.zeros_like(x)
    num_experts = gate_up_weight.shape[0]
    expert_mask = F.one_hot(topk_ids, num_classes=num_experts + 1).permute(2, 1, 0)
    for expert in torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()[:, 0].tolist():
        if expert == num_experts:
            continue
        slot, token_idx = torch.where(expert_mask[expert])
        gate, up = F.linear(x[token_idx], gate_up_weight[expert]).chunk(2, dim=-1)
        y = F.linear({act} * up, down_weight[expert])
        y = y * topk_weights[token_idx, slot, None]
        output.index_add_(0, token_idx, y.to(output.dtype))
    return output'''


def experts_args(info: ExpertsInfo, dtype: str, prefix: str = "") -> tuple[list[Arg], dict[str, str]]:
    p = prefix
    if info.style == "gptoss":
        args = [Arg(p + "gate_up_weight", ("num_experts", "hidden_size", str(2 * info.intermediate)), dtype,
                    "Expert gate/up weights (columns interleave gate and up)", init="weight", fan_in="hidden_size"),
                Arg(p + "gate_up_bias", ("num_experts", str(2 * info.intermediate)), dtype, "Expert gate/up biases",
                    init="bias"),
                Arg(p + "down_weight", ("num_experts", "intermediate_size", "hidden_size"), dtype,
                    "Expert down weights", init="weight", fan_in="intermediate_size"),
                Arg(p + "down_bias", ("num_experts", "hidden_size"), dtype, "Expert down biases", init="bias")]
        params = {p + "gate_up_weight": "gate_up_proj", p + "gate_up_bias": "gate_up_proj_bias",
                  p + "down_weight": "down_proj", p + "down_bias": "down_proj_bias"}
        return args, params
    args = [Arg(p + "gate_up_weight", ("num_experts", str(2 * info.intermediate), "hidden_size"), dtype,
                "Expert gate/up weights (gate rows first)", init="weight", fan_in="hidden_size"),
            Arg(p + "down_weight", ("num_experts", "hidden_size", "intermediate_size"), dtype, "Expert down weights",
                init="weight", fan_in="intermediate_size")]
    return args, {p + "gate_up_weight": "gate_up_proj", p + "down_weight": "down_proj"}


def hints(experts: ExpertsInfo, prefix: str = "", tokens: str = "num_tokens") -> dict:
    """For the analyser: which inputs are expert weights and how many experts `tokens` tokens can touch."""
    return {"moe": {"num_experts_axis": "num_experts", "top_k_axis": "top_k",
                    "expert_weight_inputs": sorted(a.name for a in experts_args(experts, "bfloat16", prefix)[0]),
                    "touched_experts": f"min(num_experts, {tokens} * top_k)"}}


# -- drafts -------------------------------------------------------------------------------------

def router_draft(info: RouterInfo, module_ref: str, dtype: str = "bfloat16") -> Draft:
    args, params = router_args(info, dtype)
    names = ", ".join(["hidden_states"] + [a.name for a in args])
    code = f'''{router_constants(info)}


{router_helper(info)}


@torch.no_grad()
def run({names}):
    """hidden_states: [num_tokens, hidden] -> routing weights and expert ids, both [num_tokens, top_k]."""
    return route({names})
'''
    desc = {"softmax_topk": "softmax over experts, top-k" + (", renormalised" if info.normalize else ""),
            "topk_softmax": "top-k logits (with bias), softmax over the selected",
            "sigmoid_grouped": f"sigmoid scores with a selection bias, group-limited top-k ({info.topk_groups} of "
                               f"{info.groups} groups), renormalised and scaled by {fmt_float(info.scaling)}"}[info.style]

    def call(m, inp):
        if info.bias_on_block:  # the module is the MoE block; its router takes the block's selection bias
            out = m.gate(inp["hidden_states"], m.e_score_correction_bias)
        else:
            out = m(inp["hidden_states"])
        return {"topk_weights": out[1], "topk_ids": out[2]}

    return Draft(
        name=info.name, op_type="moe_router",
        description=f"MoE router: {desc}; {info.experts} experts, top {info.top_k}, hidden {info.hidden}.",
        axes={"num_tokens": ("var", "Tokens"), "hidden_size": ("const", info.hidden, "Model width"),
              "num_experts": ("const", info.experts, "Routed experts"),
              "top_k": ("const", info.top_k, "Experts per token")},
        inputs=[Arg("hidden_states", ("num_tokens", "hidden_size"), dtype, "Input activations"), *args],
        outputs=[Arg("topk_weights", ("num_tokens", "top_k"), info.weights_dtype, "Routing weights"),
                 Arg("topk_ids", ("num_tokens", "top_k"), "int64", "Selected experts")],
        code=code, shapes="tokens",
        check=Check(module_ref, params, call, {"num_tokens": 7}, sort_ids=("topk_ids", "topk_weights")),
    )


def experts_draft(info: ExpertsInfo, module_ref: str, dtype: str = "bfloat16") -> Draft:
    args, params = experts_args(info, dtype)
    names = ["hidden_states", "topk_ids", "topk_weights"] + [a.name for a in args]
    consts = experts_constants(info)
    code = (consts + "\n\n\n" if consts else "") + f'''{experts_helper(info)}


@torch.no_grad()
def run({", ".join(names)}):
    """hidden_states: [num_tokens, hidden]; topk_ids/topk_weights: [num_tokens, top_k] -> [num_tokens, hidden]."""
    return experts({", ".join(names)})
'''
    what = ("clamped SwiGLU experts with biases (gpt-oss layout)" if info.style == "gptoss"
            else f"{GATED_NAMES[info.activation]} experts")
    return Draft(
        name=info.name, op_type="moe_experts",
        description=f"MoE {what}: {info.experts} experts of intermediate size {info.intermediate}, hidden "
                    f"{info.hidden}, {info.top_k} per token; each token's outputs are summed with its routing weights.",
        axes={"num_tokens": ("var", "Tokens"), "hidden_size": ("const", info.hidden, "Model width"),
              "intermediate_size": ("const", info.intermediate, "Expert width"),
              "num_experts": ("const", info.experts, "Routed experts"),
              "top_k": ("const", info.top_k, "Experts per token")},
        inputs=[Arg("hidden_states", ("num_tokens", "hidden_size"), dtype, "Input activations"),
                Arg("topk_ids", ("num_tokens", "top_k"), "int64", "Selected experts (distinct per token)",
                    init="expert_ids", high="num_experts"),
                Arg("topk_weights", ("num_tokens", "top_k"), info.weights_dtype, "Routing weights",
                    init="routing_weights"), *args],
        outputs=[Arg("output", ("num_tokens", "hidden_size"), dtype, "Weighted sum of expert outputs")],
        code=code, shapes="tokens",
        check=Check(module_ref, params, lambda m, inp: {"output": m(inp["hidden_states"], inp["topk_ids"],
                                                                    inp["topk_weights"])}, {"num_tokens": 7}),
        hints=hints(info),
    )
