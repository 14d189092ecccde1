"""Generic validation on modules that once failed for the harness's reasons, not theirs (CPU):

- a batch norm's running variance is drawn positive (validation copies and the problem's own inputs): drawn
  like a bias it was negative half the time, the output NaN, and every batch norm failed validation;
- a module that pins SDPA's math backend inside its forward (granite-speech's conformer attention): export
  keeps the call, not the pin, and CPU's fused kernel rounds differently; the reference is written with the pin
  and validates bit for bit;
- a copy of a tensor that an in-place operator then writes is written as a copy, not an alias: GLM's router
  divides its top-k weights in place, autograd saves a copy before, and a backward that read the divided
  tensor instead was off by 2e-2 (and refused by validation);
- a dtype handed to a module as an argument (diffusers' `hidden_dtype`: a timestep embedding casts to it before
  its linear layers) is the comparison's own in the float32 comparison: recorded as bfloat16, it made the
  float32 copy multiply bfloat16 by float32 and fail (FIBO, Sana-Sprint, Qwen-Image's timestep embeddings)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from solbench.extract import blocks
from solbench.extract.built import BuiltModel


class _Projected(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(64, 64)
        self.bn = nn.BatchNorm1d(64)

    def forward(self, x):
        return self.bn(self.proj(x).transpose(1, 2)).transpose(1, 2)


class _PinnedAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(64, 192, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (t.view(b, s, 4, 16).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        bias = torch.einsum("bhsd,bhtd->bhst", q, k) * 0.25  # an additive bias, as a relative position's
        with sdpa_kernel(SDPBackend.MATH):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        return out.transpose(1, 2).reshape(b, s, 64)


def _extracted(module_class, seq_lens: tuple[int, ...] = (48, 64, 80)) -> blocks.BlocksResult:
    with torch.device("meta"):
        module = module_class().eval()

    def make_call(axes, dtype):
        return (torch.randn(axes["batch_size"], axes["seq_len"], 64, dtype=dtype),), {}

    built = BuiltModel(f"test/{module_class.__name__}", module, "module", make_call,
                       {"batch_size": (2, 3, 2), "seq_len": seq_lens}, {"batch_size": (1,), "seq_len": (128,)})
    return blocks.extract_blocks(built, torch.bfloat16)


def test_batch_norm_validates_and_its_problem_draws_a_positive_variance():
    result = _extracted(_Projected)
    assert result.validations and all(v.passed for v in result.validations), [v.message for v in result.validations]
    norm = next(d for d in result.drafts if d.op_type == "batch_norm1d")
    namespace: dict = {}
    exec(compile(norm.reference(), norm.name, "exec"), namespace)
    inputs = namespace["get_inputs"]({"batch_size": 2, "seq_len": 8}, "cpu")
    assert (inputs["running_var"] > 0).all()
    assert not torch.isnan(namespace["run"](**inputs)).any()


def test_a_module_pinning_the_math_path_gets_a_pinned_reference():
    result = _extracted(_PinnedAttention)
    check = result.validations[0]
    assert check.passed and check.exact == {"float32": True, "bfloat16": True}, check.message
    assert "math path pinned" in check.message
    draft = result.drafts[0]
    assert "sdpa_kernel(SDPBackend.MATH)" in draft.code and draft.name == check.problem


def test_a_copy_of_a_tensor_written_in_place_stays_a_copy():
    from torch.fx.experimental.proxy_tensor import make_fx

    from solbench.extract import codegen

    def saved_then_divided(weights, denominator):
        saved = weights.clone()
        weights.div_(denominator)
        return saved / denominator + weights

    graph = make_fx(saved_then_divided)(torch.ones(2, 4), torch.full((2, 1), 2.0))
    inputs = [codegen.Input(name, "user", k, torch.empty(2, n)) for k, (name, n) in
              enumerate((("weights", 4), ("denominator", 1)))]
    gen = codegen.generate_graph(graph, torch.float32, inputs)
    assert ".clone()" in gen.code, gen.code
    namespace: dict = {}
    exec(compile("import torch\nimport math\nimport torch.nn.functional as F\n" + gen.code, "<run>", "exec"),
         namespace)
    weights, denominator = torch.arange(8.0).reshape(2, 4), torch.full((2, 1), 2.0)
    want = saved_then_divided(weights.clone(), denominator)
    assert torch.equal(namespace["run"](weights.clone(), denominator), want)
    # a copy nothing writes into is still no line of its own
    plain = make_fx(lambda x: x.clone() * 2)(torch.ones(2, 4))
    assert ".clone()" not in codegen.generate_graph(plain, torch.float32, inputs[:1]).code


def test_a_copy_of_a_row_stays_a_copy_when_its_base_is_written_elsewhere():
    """Gemma 3n's AltUp copies `corrected[0]` and then adds into `corrected[1:]`: an alias of the row would
    share the written tensor's version, and autograd refuses the row it saved for the product."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from solbench.extract import codegen

    def corrected(rows, scale):
        first = rows[0].clone()
        out = first * scale
        rows[1:] += out
        return rows

    graph = make_fx(corrected)(torch.ones(3, 4), torch.ones(4))
    inputs = [codegen.Input("rows", "user", 0, torch.empty(3, 4)), codegen.Input("scale", "user", 1, torch.empty(4))]
    gen = codegen.generate_graph(graph, torch.float32, inputs)
    assert ".clone()" in gen.code, gen.code
    namespace: dict = {}
    exec(compile("import torch\nimport math\nimport torch.nn.functional as F\n" + gen.code, "<run>", "exec"),
         namespace)
    leaf, scale = torch.randn(3, 4, requires_grad=True), torch.randn(4, requires_grad=True)
    namespace["run"](leaf * 1.0, scale).sum().backward()  # an alias: "modified by an inplace operation"
    want = torch.autograd.grad(corrected(leaf * 1.0, scale).sum(), scale)[0]
    assert torch.equal(scale.grad, want)



class _SlicedProjection(nn.Module):
    """SD3.5's joint attention: the projection reads a slice of a longer sequence (a non-contiguous input)."""

    def __init__(self):
        super().__init__()
        self.up = nn.Linear(64, 256)
        self.out = nn.Linear(256, 64)

    def forward(self, x):
        wide = self.up(x)
        joint = torch.cat([wide, wide.flip(1)], dim=1)
        return self.out(joint[:, : x.shape[1]])


def test_a_projection_of_a_slice_validates_bit_for_bit_in_float32():
    # The bug's premise (the parameter's requires_grad flag alone moves F.linear's result on a slice of few
    # rows) depends on the CPU's BLAS path: it held on the machine the bug was found on, not on every CPU.
    # What must hold everywhere is that the extracted reference validates bit for bit.
    result = _extracted(_SlicedProjection, seq_lens=(10, 6, 8))  # compared at (3, 6) and (2, 8)
    check = next(v for v, d in zip(result.validations, result.drafts) if d.op_type == "_sliced_projection")
    assert check.passed and check.exact == {"float32": True, "bfloat16": True}, check.message


class _Stem(nn.Module):
    """A patch embedding the model calls itself (as Wan's transformer calls its Conv3d), then a block."""

    def __init__(self):
        super().__init__()
        self.patch = nn.Conv1d(64, 64, 2, stride=2)
        self.block = _Projected()

    def forward(self, x):
        return self.block(self.patch(x.transpose(1, 2)).transpose(1, 2))


def test_a_primitive_no_emitted_block_holds_is_a_block_of_its_own():
    """Left out as "computed inside the block that holds it", Wan's patch embedding was computed nowhere."""
    result = _extracted(_Stem)
    assert sorted(d.op_type for d in result.drafts) == ["_projected", "batch_norm1d", "conv1d"], result.drafts
    assert all(v.passed for v in result.validations), [v.message for v in result.validations]
    inside = [n for n in result.not_emitted if n.path == "block.proj"]  # held by an emitted block: inside it
    assert inside and inside[0].reason.startswith("a torch.nn primitive")


def test_a_decoder_that_cross_attends_to_vision_states_is_called_with_them():
    """Llama 3.2 Vision's text decoder skips its cross-attention layers without vision states: they were never
    called, so never captured. The call now carries tiles x (patches + a class token) states at the text width."""
    from solbench.extract import build, capture
    from tests.extract.test_composite_parts import MLLAMA

    built = build.build_transformers("tiny/mllama", dict(MLLAMA))
    calls = capture.record_calls(built, capture.axis_points(built)[0], torch.bfloat16)
    cross = next(p for p in calls if p.endswith("layers.1.cross_attn"))
    states = calls[cross].kwargs["cross_attention_states"]
    assert tuple(states.shape[1:]) == (4 * ((28 // 14) ** 2 + 1), 64)


class _TimeEmbedding(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(64, 64)

    def forward(self, t, hidden_dtype):
        return self.linear(torch.sin(t.float() * 1000.0).to(hidden_dtype))


class _TimeEmbeddingLike(nn.Module):
    """Qwen-Image's: the dtype is read off a tensor whose values the block never reads."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(64, 64)

    def forward(self, t, hidden_states):
        return self.linear(torch.sin(t.float() * 1000.0).to(hidden_states.dtype))


class _Timed(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = _TimeEmbedding()
        self.like = _TimeEmbeddingLike()
        self.out = nn.Linear(64, 64)

    def forward(self, x):
        return self.out(self.embed(x, hidden_dtype=x.dtype) + self.like(x.float(), x))


def test_a_dtype_argument_or_an_unread_tensors_dtype_is_the_comparisons_own():
    result = _extracted(_Timed)
    for kind in ("_time_embedding", "_time_embedding_like"):
        check = next(v for v in result.validations if v.problem.rsplit("_", 1)[0] == kind)
        assert check.passed and check.exact == {"float32": True, "bfloat16": True}, (kind, check.message)
