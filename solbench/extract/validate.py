"""Check every emitted reference against the transformers module it came from, on CPU.

A small CPU copy of the model is built (real hidden sizes and head counts, a short vocabulary, only as
many layers as needed); each problem's weights are copied out of that model into the reference's
inputs, the other inputs are drawn at a small token count, and both sides run in float32 and bfloat16.
Layers whose parameters would not fit the time budget are validated with fewer experts and a narrower
MLP (the references take those sizes from their inputs, so the same source is exercised).

Validation runs on one intra-op thread. At a handful of tokens every operator is either tiny or bound by
memory bandwidth, so a second OpenMP thread buys little, and on a machine whose cores are shared each
operator's fork/join waits for a descheduled thread: measured on a busy 2-core machine, `index_add_` on a
[7, 4096] tensor took 37 ms with two threads and 7 us with one, and Qwen3-8B's validation 13.2 s of CPU
with two threads and 8.1 s with one.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

from solbench.extract import block_pool
from solbench.extract import workloads as wl
from solbench.extract.copies import standard_normal
from solbench.extract.draft import Draft
from solbench.extract.trace import TracedModel, find_layers, hf_config, instantiate, parameter_count

DEFAULT_MAX_LAYER_PARAMS = 300_000_000  # summed over layer kinds: keeps a model under ~15 s
VALIDATION_VOCAB = 4096
_EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")


@dataclass
class Validation:
    problem: str
    max_abs_error: dict[str, float] = field(default_factory=dict)  # dtype -> max |ref - module|
    exact: dict[str, bool] = field(default_factory=dict)
    passed: bool = True
    reduced: bool = False
    message: str = ""


class Validator:
    """Builds the CPU model once per extracted model and validates drafts against it."""

    def __init__(self, traced: TracedModel, max_layer_params: int = DEFAULT_MAX_LAYER_PARAMS, seed: int = 0):
        self.traced = traced
        self.seed = seed
        # every key the built config has (shipped facts may leave some to the library's defaults)
        facts = {k: v for k, v in traced.hf_config.to_dict().items() if v is not None}
        overrides: dict = {"num_hidden_layers": max(k.index for k in traced.kinds) + 1}
        if "vocab_size" in facts:
            overrides["vocab_size"] = min(facts["vocab_size"], VALIDATION_VOCAB)
            overrides["pad_token_id"] = None
        total = sum(parameter_count(k.module) for k in traced.kinds)
        self.reduced = total > max_layer_params
        self.axis_overrides: dict[str, int] = {}
        if "vocab_size" in overrides:
            self.axis_overrides["vocab_size"] = overrides["vocab_size"]
        if self.reduced:
            has_experts = any(isinstance(facts.get(key), int) and facts[key] > 0 for key in _EXPERT_KEYS)
            caps = (("intermediate_size", 1024 if has_experts else 2048), ("moe_intermediate_size", 512))
            for key, cap in caps:
                if isinstance(facts.get(key), int):
                    overrides[key] = min(facts[key], cap)
            # enough experts for top-k and for group-limited routing (two per group)
            keep = max(8, 2 * facts.get("n_group", 1) or 2, 2 * facts.get("num_experts_per_tok", 1))
            for key in _EXPERT_KEYS:
                if isinstance(facts.get(key), int):
                    overrides[key] = min(facts[key], keep)
                    self.axis_overrides["num_experts"] = overrides[key]
        # per-layer lists (layer_types, ...) follow the shortened stack: transformers checks their lengths
        total = facts.get("num_hidden_layers")
        for key, value in facts.items():
            if isinstance(value, list) and len(value) == total and key not in overrides:
                overrides[key] = value[: overrides["num_hidden_layers"]]
        self.overrides = overrides
        self._model: nn.Module | None = None
        self._initialised: set[int] = set()
        self._dtype = torch.float32

    # -- the CPU model ----------------------------------------------------------------------------

    def model(self) -> nn.Module:
        if self._model is None:
            cfg = hf_config(self.traced.config, **self.overrides)
            meta = instantiate(cfg, self.traced.is_encoder, device="meta", dtype=torch.float32)
            self._model = meta.to_empty(device="cpu").eval()
            for module in self._model.modules():  # constant buffers that to_empty left uninitialised
                if hasattr(module, "scalar_embed_scale") and hasattr(module, "embed_scale"):
                    module.embed_scale.fill_(module.scalar_embed_scale)
        return self._model

    def module(self, ref: str) -> nn.Module:
        model = self.model()
        if ref == "embed":
            return model.get_input_embeddings()
        if ref == "head":
            return model.get_output_embeddings()
        scope, _, path = ref.partition(":")
        if scope == "model":
            return model.get_submodule(path)
        index = int(scope.removeprefix("layer"))
        layer = find_layers(model, self.overrides["num_hidden_layers"])[index]
        return layer.get_submodule(path) if path else layer

    def _initialise(self, module: nn.Module, params: dict[str, str]) -> None:
        gen = torch.Generator().manual_seed(self.seed + 1)
        with torch.no_grad():
            for name, p in module.named_parameters():
                if id(p) in self._initialised:
                    continue
                self._initialised.add(id(p))
                _init_(name, p, gen)
            for path in params.values():
                owner, _, attr = path.rpartition(".")
                holder = module.get_submodule(owner) if owner else module
                buffer = holder._buffers.get(attr)
                if buffer is not None and id(buffer) not in self._initialised:
                    self._initialised.add(id(buffer))
                    buffer.copy_(0.1 * torch.randn(buffer.shape, generator=gen))

    def set_dtype(self, dtype: torch.dtype) -> None:
        if dtype != self._dtype:
            self.model().to(dtype)
            self._dtype = dtype

    # -- drafts -----------------------------------------------------------------------------------

    def validate_all(self, drafts: list[Draft], low_precision: torch.dtype = torch.bfloat16,
                     progress: Callable[[str], None] | None = None) -> list[Validation]:
        """All drafts in float32, then the forward ones in `low_precision` (one model cast per phase); with
        `block_pool.processes`, each phase's drafts on forked workers (`_spread`).

        Backward problems are compared in float32 only: in bf16 autograd and the explicit formulas differ
        by rounding alone, and their weight-gradient products dominate the time budget. `progress` is told
        which problem is being compared, in which dtype."""
        results = {d.name: Validation(d.name, reduced=self.reduced) for d in drafts}
        steps = [(dtype, draft) for dtype in (torch.float32, low_precision) for draft in drafts
                 if dtype == torch.float32 or not draft.op_type.endswith("_backward")]
        tell = progress or (lambda step: None)
        spread = block_pool.asked() > 1 and 1 < len(results) == len(drafts)  # names unique: one result each
        workers = block_pool.wanted(self._largest_module(drafts)) if spread else 1
        with one_thread():
            if workers > 1:
                for phase in (range(len(drafts)), range(len(drafts), len(steps))):
                    self._spread(steps, phase, results, workers, tell)
            else:
                for number, step in enumerate(steps, 1):
                    self._step(step, results, f"{number}/{len(steps)}", tell)
        return [results[d.name] for d in drafts]

    def _largest_module(self, drafts: list[Draft]) -> int:
        """The parameters of the largest module a draft is compared with: what a forked worker adds to the model
        it shares with its parent (gradients, at most, of a backward's module; activations besides)."""
        sizes = [0]
        for draft in drafts:
            try:
                sizes.append(parameter_count(self.module(draft.check.module)) if draft.check is not None else 0)
            except Exception:  # noqa: BLE001 - its comparison meets the same error and reports it
                continue
        return max(sizes)

    def _step(self, step: tuple[torch.dtype, Draft], results: dict[str, Validation], number: str,
              tell: Callable[[str], None]) -> None:
        dtype, draft = step
        label = str(dtype).removeprefix("torch.")
        tell(f"validating {draft.name} ({label}, {number})")
        try:
            self.validate(draft, (dtype,), results[draft.name])
        except Exception as exc:  # noqa: BLE001 - a broken check is a failed validation, reported
            result = results[draft.name]
            result.passed = False
            result.message += f"{label}: {type(exc).__name__}: {exc}; "

    def _spread(self, steps: list, phase: range, results: dict[str, Validation], workers: int,
                tell: Callable[[str], None]) -> None:
        """One phase's steps on forked workers, taken back in order. The model is cast and every draft's
        module initialised here first, in the steps' order, as one process would before each comparison
        (a parameter two drafts share is drawn once, by the first): each worker then compares on the weights
        one process would have."""
        if not phase:
            return
        for dtype, draft in (steps[k] for k in phase):
            try:
                self.set_dtype(dtype)
                if draft.check is not None:
                    self._initialise(self.module(draft.check.module), draft.check.params)
            except Exception:  # noqa: BLE001 - the step meets the same error and reports it
                continue

        def work(k: int) -> Validation:  # in a forked worker
            self._step(steps[k], results, "", lambda step: None)
            return results[steps[k][1].name]

        with block_pool.ahead(work, list(phase), workers) as pool:
            for k in phase:
                found = pool.take(k)
                if found is None:
                    self._step(steps[k], results, f"{k + 1}/{len(steps)}", tell)
                else:
                    tell(f"validated {found.problem} ({str(steps[k][0]).removeprefix('torch.')}, {k + 1}/{len(steps)})")
                    results[found.problem] = found

    def validate(self, draft: Draft, dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16),
                 result: Validation | None = None) -> Validation:
        result = result or Validation(draft.name, reduced=self.reduced)
        check = draft.check
        if check is None:
            result.message = "no module to compare with"
            return result
        with one_thread():
            self._compare_dtypes(draft, dtypes, result)
        return result

    def _compare_dtypes(self, draft: Draft, dtypes: tuple[torch.dtype, ...], result: Validation) -> None:
        check = draft.check
        namespace: dict = {}
        exec(compile(draft.reference(), f"<reference {draft.name}>", "exec"), namespace)
        run = namespace["run"]
        for dtype in dtypes:
            self.set_dtype(dtype)
            module = self.module(check.module)
            self._initialise(module, check.params)
            inputs = self._inputs(draft, module, dtype)
            if draft.op_type.endswith("_backward"):
                want = check.call(module, inputs)
            else:
                with torch.no_grad():
                    want = check.call(module, inputs)
            want = {k: v.detach() for k, v in want.items()}
            with torch.no_grad():
                got = run(**inputs)
            got = dict(zip([o.name for o in draft.outputs], got if isinstance(got, tuple) else (got,)))
            if check.sort_ids:
                got, want = _sorted_by_ids(got, check.sort_ids), _sorted_by_ids(want, check.sort_ids)
            label = str(dtype).removeprefix("torch.")
            errors, exact, ok, why = _compare(draft, got, want, dtype)
            result.max_abs_error[label] = errors
            result.exact[label] = exact
            if not ok:
                result.passed = False
                result.message += f"{label}: {why}; "

    def _inputs(self, draft: Draft, module: nn.Module, dtype: torch.dtype) -> dict:
        axes = {n: s[1] for n, s in draft.axes.items() if s[0] == "const"} | self.axis_overrides | draft.check.axes
        gen = torch.Generator().manual_seed(self.seed + 2)
        inputs: dict = {}
        params = draft.check.params
        rope_done = False
        for arg in draft.inputs:
            if arg.name in params:
                inputs[arg.name] = _get(module, params[arg.name]).detach()
                continue
            want_dtype = dtype if arg.dtype in ("bfloat16", "float16", "float32") and dtype == torch.float32 \
                else _torch_dtype(arg.dtype)
            if arg.init.startswith(("cos", "sin")):
                if not rope_done:
                    cos, sin = _rope(arg, axes, gen, want_dtype)
                    for other in draft.inputs:
                        if other.init.startswith("cos"):
                            inputs[other.name] = cos
                        elif other.init.startswith("sin"):
                            inputs[other.name] = sin
                    rope_done = True
                continue
            inputs[arg.name] = _make(arg, axes, gen, want_dtype)
        return {a.name: inputs[a.name] for a in draft.inputs}


@contextlib.contextmanager
def one_thread(threads: int = 1) -> Iterator[None]:
    """Run torch operators on `threads` intra-op threads inside the block (one: the module docstring says
    why)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# -- helpers ----------------------------------------------------------------------------------------

def _torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def _get(module: nn.Module, path: str):
    owner, _, attr = path.rpartition(".")
    holder = module.get_submodule(owner) if owner else module
    return getattr(holder, attr)


def _init_(name: str, p: torch.Tensor, gen: torch.Generator) -> None:
    """Fill a parameter in place at a realistic scale (norm weights near 1, weights ~ N(0, 1/fan_in))."""
    leaf = name.rsplit(".", 1)[-1]
    if p.dtype == torch.float32 and p.is_contiguous():  # 1 M elements or more: the seeded pool, 10x faster
        standard_normal(tuple(p.shape), gen, out=p.detach())
    else:
        p.normal_(generator=gen)
    if "norm" in name and leaf == "weight":
        p.mul_(0.1).add_(1.0)
    elif leaf.endswith("bias") or leaf == "sinks" or p.dim() == 1:
        p.mul_(0.1)
    elif "embed" not in name and "token" not in name:
        fan_in = math.prod(p.shape[1:]) if p.dim() == 4 else p.shape[-1]
        p.mul_(fan_in ** -0.5)


def _shape(arg, axes) -> tuple[int, ...]:
    return tuple(int(s) if s.isdigit() else axes[s] for s in arg.shape)


def _make(arg, axes, gen, dtype) -> torch.Tensor:
    shape = _shape(arg, axes)
    init = arg.init
    if init == "token_ids":
        return torch.randint(0, axes[arg.high], shape, generator=gen)
    if init == "expert_ids":
        return torch.rand(*shape[:-1], axes[arg.high], generator=gen).argsort(dim=-1)[..., : shape[-1]]
    if init == "routing_weights":
        return torch.softmax(torch.randn(shape, generator=gen), dim=-1).to(dtype)
    base = torch.randn(shape, generator=gen)
    if init == "weight":
        fan_in = int(arg.fan_in) if arg.fan_in.isdigit() else axes[arg.fan_in]
        base = base * fan_in ** -0.5
    elif init == "norm_weight":
        base = 1.0 + 0.1 * base
    elif init in ("offset_norm_weight", "bias"):
        base = 0.1 * base
    return base.to(dtype)


def _rope(arg, axes, gen, dtype):
    shape = _shape(arg, axes)
    half = arg.init.endswith("_half")
    rot = 2 * shape[-1] if half else shape[-1]
    positions = torch.randint(0, 8192, shape[:-1], generator=gen).float()
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, rot, 2).float() / rot))
    angles = positions[..., None] * inv_freq
    if not half:
        angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _sorted_by_ids(outputs: dict, names: tuple[str, str]) -> dict:
    ids_name, weights_name = names
    ids, order = torch.sort(outputs[ids_name], dim=-1)
    return outputs | {ids_name: ids, weights_name: torch.gather(outputs[weights_name], -1, order)}


def _compare(draft: Draft, got: dict, want: dict, dtype: torch.dtype) -> tuple[float, bool, bool, str]:
    """Largest error, bit-exactness, and whether enough elements are within tolerance.

    Outputs can be weight-sized (weight gradients: 50M elements for one Qwen3-8B MLP matrix), so the
    common case costs two passes: the difference, then its largest magnitude. Only when that exceeds the
    absolute tolerance are elements counted against `atol + rtol * |want|`. NaN is a mismatch unless the
    module has NaN in the same place."""
    tol = wl.tolerance(draft)
    if dtype == torch.float32:
        tol = {"max_atol": 1e-4 * draft.tolerance_scale, "max_rtol": 1e-4 * draft.tolerance_scale,
               "required_matched_ratio": tol["required_matched_ratio"]}
    worst, ok, why = 0.0, True, ""
    for name, w in want.items():
        g = got.get(name)
        if g is None:
            return math.inf, False, False, f"reference returned no {name!r}"
        if g.shape != w.shape:
            return math.inf, False, False, f"{name}: shape {tuple(g.shape)} != module {tuple(w.shape)}"
        if g.dtype != w.dtype:
            return math.inf, False, False, f"{name}: dtype {g.dtype} != module {w.dtype}"
        if not g.is_floating_point():
            if not torch.equal(g, w):
                return math.inf, False, False, f"{name}: integer outputs differ"
            continue
        if not g.numel():
            continue
        g, w = (g, w) if g.dtype == torch.float32 else (g.float(), w.float())
        diff = torch.sub(g, w)
        largest = float(torch.linalg.vector_norm(diff, ord=math.inf))
        if not largest <= tol["max_atol"]:  # also when NaN: count the elements
            diff.abs_()
            allowed = w.abs().mul_(tol["max_rtol"]).add_(tol["max_atol"])
            outside = ~(diff <= allowed)
            if not math.isfinite(largest):  # equal infinities and NaN where the module has NaN match
                outside &= (g != w) & ~(g.isnan() & w.isnan())
            matched = 1.0 - float(outside.sum()) / diff.numel()
            if matched < tol["required_matched_ratio"]:
                ok = False
                why += f"{name}: only {matched:.4f} of elements within tolerance (max error {largest:.3g}) "
        worst = largest if math.isnan(largest) or largest > worst else worst
    return worst, worst == 0.0, ok, why.strip()
