"""FLOPs of single aten ops, from shapes alone.

Matmul-class ops (the work tensor cores do) are counted exactly as 2 x MACs. Everything else is
"other" work, counted by a simple, documented convention: one FLOP per output element for
pointwise arithmetic, one per input element for reductions, a few per element for fused
normalisations. Pure data movement (copies, casts, gathers, concatenation, fills) costs no FLOPs:
its cost is bytes, which the fused memory model counts at the graph boundary.
"""

from __future__ import annotations

import math

import torch

aten = torch.ops.aten


def _prod(values) -> int:
    return math.prod(int(v) for v in values)


def _logical_k(t: torch.Tensor) -> int:
    """Contracted length of a matmul operand's last dim; packed fp4 holds two values per element."""
    k = int(t.shape[-1])
    return 2 * k if t.dtype == getattr(torch, "float4_e2m1fn_x2", None) else k


def _mm(args, out) -> float:
    a, b = args[0], args[1]
    return 2.0 * a.shape[0] * _logical_k(a) * b.shape[1]


def _addmm(args, out) -> float:
    return _mm(args[1:], out)


def _bmm(args, out) -> float:
    a, b = args[0], args[1]
    return 2.0 * a.shape[0] * a.shape[1] * _logical_k(a) * b.shape[2]


def _baddbmm(args, out) -> float:
    return _bmm(args[1:], out)


def _mv(args, out) -> float:
    a = args[0]
    return 2.0 * a.shape[0] * a.shape[1]


def _addmv(args, out) -> float:
    return _mv(args[1:], out)


def _dot(args, out) -> float:
    return 2.0 * args[0].numel()


def _convolution(args, out) -> float:
    inp, weight = args[0], args[1]
    transposed = bool(args[6]) if len(args) > 6 else False
    kernel = _prod(weight.shape[2:])
    if transposed:  # weight [C_in, C_out/groups, k...]: every input element meets C_out/groups x k weights
        return 2.0 * inp.numel() * weight.shape[1] * kernel
    return 2.0 * out.numel() * weight.shape[1] * kernel  # weight [C_out, C_in/groups, k...]


def _convolution_backward(args, out) -> float:
    """grad_input and grad_weight (as `output_mask` asks) each cost what the forward convolution did."""
    grad_out, inp, weight = args[0], args[1], args[2]
    transposed = bool(args[7]) if len(args) > 7 else False
    mask = args[10] if len(args) > 10 else (True, True, True)
    kernel = _prod(weight.shape[2:])
    forward = 2.0 * (inp.numel() if transposed else grad_out.numel()) * weight.shape[1] * kernel
    return forward * (int(bool(mask[0])) + int(bool(mask[1])))


def _scaled_mm(args, out) -> float:
    a, b = args[0], args[1]
    return 2.0 * a.shape[0] * _logical_k(a) * b.shape[1]


def _grouped_mm(args, out) -> float:
    a, b = args[0], args[1]
    if a.dim() == 2 and b.dim() == 2:  # groups split K: out [G, M, N], total K = a's K
        return 2.0 * out.shape[-2] * out.shape[-1] * _logical_k(a)
    return 2.0 * out.numel() * _logical_k(a)


def _sdpa_aten(args, out) -> float:
    q, k, v = args[0], args[1], args[2]
    batch = _prod(q.shape[:-2])
    return 2.0 * batch * q.shape[-2] * k.shape[-2] * (q.shape[-1] + v.shape[-1])


# op packet name -> FLOPs function(args, first output)
MATMUL_OPS = {
    "mm": _mm, "addmm": _addmm, "_addmm_activation": _addmm, "bmm": _bmm, "baddbmm": _baddbmm,
    "addbmm": _baddbmm, "mv": _mv, "addmv": _addmv, "dot": _dot, "vdot": _dot, "convolution": _convolution,
    "_convolution": _convolution, "convolution_backward": _convolution_backward, "_scaled_mm": _scaled_mm, "_int_mm": _mm, "_grouped_mm": _grouped_mm,
    "_scaled_grouped_mm": _grouped_mm, "_scaled_dot_product_flash_attention": _sdpa_aten,
    "_scaled_dot_product_efficient_attention": _sdpa_aten, "_scaled_dot_product_cudnn_attention": _sdpa_aten,
    "_scaled_dot_product_flash_attention_for_cpu": _sdpa_aten, "_flash_attention_forward": _sdpa_aten,
    "_efficient_attention_forward": _sdpa_aten,
}

# Which args of a matmul op are its two operands (for the operand dtype).
MATMUL_OPERANDS = {"addmm": (1, 2), "_addmm_activation": (1, 2), "baddbmm": (1, 2), "addbmm": (1, 2),
                   "addmv": (1, 2)}

# Reductions and scans: one FLOP per input element (per element of the reduced tensor).
REDUCTION_OPS = frozenset({
    "sum", "mean", "amax", "amin", "max", "min", "prod", "var", "std", "var_mean", "std_mean", "norm",
    "linalg_vector_norm", "logsumexp", "cumsum", "cumprod", "cummax", "cummin", "logcumsumexp", "argmax",
    "argmin", "any", "all", "count_nonzero", "aminmax", "nansum", "nanmean", "median", "mode", "kthvalue",
    "topk", "sort", "argsort", "_log_softmax_backward_data", "_softmax_backward_data", "histc", "bincount",
    "special_logsumexp", "renorm", "dist", "cross", "trace", "linalg_norm", "_cummax_helper", "_cummin_helper",
    "msort", "nanmedian", "_logcumsumexp",
})

# Fused multi-step kernels, FLOPs per element of their (first) input.
PER_ELEMENT_OPS = {
    "_softmax": 4, "_log_softmax": 4, "softmax": 4, "log_softmax": 4, "native_layer_norm": 5,
    "native_group_norm": 5, "native_batch_norm": 4, "_native_batch_norm_legit": 4,
    "_native_batch_norm_legit_no_training": 4, "_fused_rms_norm": 4, "rms_norm": 4, "_safe_softmax": 4,
    "native_layer_norm_backward": 8, "native_group_norm_backward": 8, "native_batch_norm_backward": 8,
    "_fused_rms_norm_backward": 8, "_batch_norm_with_update": 4, "_batch_norm_no_update": 4,
    "batch_norm_backward": 8, "scatter_add": 1, "scatter_reduce": 1, "index_add": 1, "index_reduce": 1,
    "_embedding_bag": 1, "_embedding_bag_forward_only": 1, "embedding_dense_backward": 1, "index_put": 0,
    "_index_put_impl": 0,
}

# Data movement, shape and allocation ops: no FLOPs, and understood (not "unknown").
FREE_OPS = frozenset({
    "_to_copy", "copy", "copy_", "clone", "contiguous", "cat", "stack", "index", "index_select", "gather",
    "scatter", "embedding", "fill", "fill_", "zero", "zero_", "zeros", "zeros_like", "ones", "ones_like",
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "new_zeros", "new_ones",
    "new_full", "full", "full_like", "arange", "linspace", "logspace", "eye", "rand", "randn", "randint",
    "rand_like", "randn_like", "randint_like", "randperm", "normal", "uniform", "uniform_", "normal_",
    "bernoulli", "bernoulli_", "exponential_", "random_", "multinomial", "constant_pad_nd", "reflection_pad1d",
    "reflection_pad2d", "reflection_pad3d", "replication_pad1d", "replication_pad2d", "replication_pad3d",
    "repeat", "repeat_interleave", "flip", "roll", "tril", "triu", "nonzero", "_local_scalar_dense",
    "lift_fresh", "lift_fresh_copy", "masked_scatter", "masked_select", "index_copy", "index_fill",
    "slice_scatter", "select_scatter", "diagonal_scatter", "as_strided_scatter", "tril_indices",
    "triu_indices", "one_hot", "unique", "_unique2", "unique_consecutive", "unique_dim", "searchsorted",
    "bucketize", "im2col", "col2im", "pixel_shuffle", "pixel_unshuffle", "channel_shuffle", "set_",
    "resize_", "_assert_async", "_assert_scalar", "_functional_assert_async", "sym_constrain_range",
    "scalar_tensor", "_pin_memory", "detach_", "_reshape_alias", "upsample_nearest1d", "upsample_nearest2d",
    "upsample_nearest3d", "_upsample_nearest_exact1d", "_upsample_nearest_exact2d", "_upsample_nearest_exact3d",
    "record_stream", "_efficientzerotensor", "native_dropout", "dropout", "view_as_real", "view_as_complex",
    "_make_per_tensor_quantized_tensor", "_local_scalar", "nan_to_num", "take", "put", "_fused_dropout", "_sparse_coo_tensor_with_dims_and_tensors",
    "squeeze_copy", "unsqueeze_copy", "view_copy", "permute_copy", "expand_copy", "t_copy", "sym_size",
    "sym_stride", "sym_numel", "sym_storage_offset", "is_nonzero", "equal", "allclose", "isin",
    "_has_compatible_shallow_copy_type", "_linalg_check_errors", "split_with_sizes_copy", "split_copy", "unbind_copy",
    "unsafe_split", "unsafe_split_with_sizes", "unsafe_chunk",  # views whose schema does not say so (torch.lstm's gates)
    # autograd's data movement: a view's gradient placed into zeros of the base's shape
    "slice_backward", "select_backward", "diagonal_backward", "unfold_backward",
})

# Ops that read only the rows they gather from their first tensor argument (the "table").
GATHER_OPS = frozenset({"index", "index_select", "gather", "embedding", "_embedding_bag", "take",
                        "take_along_dim", "masked_select", "_embedding_bag_forward_only"})

# Interpolation: a few FLOPs per output element (the taps' weighted sum, without the multiply-adds'
# second half: a lower count). Nearest-neighbour upsampling is data movement (FREE_OPS).
WINDOW_OPS = {"upsample_bilinear2d": 4, "upsample_bicubic2d": 16, "upsample_linear1d": 2,
              "upsample_trilinear3d": 8, "_upsample_bilinear2d_aa": 8, "_upsample_bicubic2d_aa": 16,
              "grid_sampler_2d": 8, "grid_sampler_3d": 16}
# Pooling: one FLOP (add or compare) per window element per output element.
POOL_OPS = frozenset({"avg_pool1d", "avg_pool2d", "avg_pool3d", "max_pool1d", "max_pool2d", "max_pool3d",
                      "max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices"})
# Adaptive pooling: every input element is added or compared once.
ADAPTIVE_POOL_OPS = frozenset({"adaptive_avg_pool1d", "_adaptive_avg_pool2d", "_adaptive_avg_pool3d",
                               "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d"})
# Backward of interpolation and pooling: FLOPs per element of grad_output (their first tensor).
GRAD_WINDOW_OPS = {"upsample_nearest1d_backward": 1, "upsample_nearest2d_backward": 1,
                   "upsample_nearest3d_backward": 1, "_upsample_nearest_exact1d_backward": 1,
                   "_upsample_nearest_exact2d_backward": 1, "_upsample_nearest_exact3d_backward": 1,
                   "upsample_linear1d_backward": 2, "upsample_bilinear2d_backward": 4,
                   "upsample_trilinear3d_backward": 8, "upsample_bicubic2d_backward": 16,
                   "avg_pool2d_backward": 1, "avg_pool3d_backward": 1, "max_pool2d_with_indices_backward": 1,
                   "max_pool3d_with_indices_backward": 1, "_adaptive_avg_pool2d_backward": 1,
                   "_adaptive_avg_pool3d_backward": 1, "adaptive_max_pool2d_backward": 1,
                   "adaptive_max_pool3d_backward": 1}
FFT_OPS = frozenset({"_fft_r2c", "_fft_c2r", "_fft_c2c"})


# Pointwise arithmetic not tagged as such in aten.
EXTRA_POINTWISE = frozenset({"floor_divide", "masked_fill", "remainder", "fmod", "clamp_min", "clamp_max",
                             "hardtanh", "leaky_relu", "elu", "softplus", "threshold", "prelu", "rrelu",
                             "logit", "xlogy", "polar", "complex", "angle", "heaviside", "glu",
                             # activation backwards aten does not tag pointwise (silu's, gelu's are)
                             "softplus_backward", "hardtanh_backward", "leaky_relu_backward", "elu_backward",
                             "mish_backward", "hardswish_backward", "hardsigmoid_backward", "logit_backward",
                             "glu_backward", "native_dropout_backward"})


# Unchecked forms that autograd and decompositions emit (a traced backward's interpolation): the same work
UNCHECKED_AS = {"_unsafe_index": "index", "_unsafe_index_put": "index_put", "_unsafe_masked_index": "index",
                "_unsafe_masked_index_put_accumulate": "index_put"}


def packet_name(func) -> str:
    """The op's name without overload, in-place ops named like their out-of-place form (add_ -> add), the
    unchecked indexing forms like the checked ones (`_unsafe_index` -> index)."""
    name = func.overloadpacket.__name__
    if name in UNCHECKED_AS:
        return UNCHECKED_AS[name]
    if name.endswith("_") and not name.endswith("__") and name not in FREE_OPS:
        return name[:-1]
    return name


def _split_radix_flops(n: int) -> float:
    """Real FLOPs of a complex FFT of length n by split radix, 4 n log2 n - 6 n + 8: the lowest
    published count for power-of-two lengths (the classic radix-2 count, 5 n log2 n, is above it)."""
    if n < 2:
        return 0.0
    return max(0.0, 4.0 * n * math.log2(n) - 6.0 * n + 8.0)


def fft_flops(name: str, args, out) -> float:
    """Complex-to-complex: split radix over each transformed dim of every batch; real input or output
    (`_fft_r2c`, `_fft_c2r`) half of it (a length-n real transform is one length-n/2 complex one)."""
    inp = args[0]
    dims = list(args[1]) if len(args) > 1 else list(range(inp.dim()))
    lengths = [max(inp.shape[d], out.shape[d]) for d in dims]
    total = _prod(lengths) if lengths else 1
    batch = max(inp.numel(), out.numel()) / max(total, 1)
    flops = sum(total / n * _split_radix_flops(n) for n in lengths)  # each 1-D pass over the whole block
    return float(batch * flops * (0.5 if name != "_fft_c2c" else 1.0))


def _window_elements(args) -> int:
    kernel = args[1] if len(args) > 1 else 1
    return _prod(kernel) if isinstance(kernel, (list, tuple)) else int(kernel)


def other_flops(name: str, func, args, outs: list[torch.Tensor]) -> float | None:
    """Non-matmul FLOPs of one op; None when the op is not understood."""
    first_in = next((a for a in args if isinstance(a, torch.Tensor)), None)
    out = outs[0] if outs else None
    if name in FREE_OPS and name not in PER_ELEMENT_OPS:
        return 0.0
    if name in FFT_OPS and first_in is not None and out is not None:
        return fft_flops(name, args, out)
    if name in PER_ELEMENT_OPS:
        base = first_in.numel() if first_in is not None else 0
        if name in ("scatter_add", "scatter_reduce", "index_add", "index_reduce"):
            src = args[3] if len(args) > 3 and isinstance(args[3], torch.Tensor) else first_in
            base = src.numel()
        return float(PER_ELEMENT_OPS[name] * base)
    if name in REDUCTION_OPS:
        return float(first_in.numel()) if first_in is not None else 0.0
    if name in WINDOW_OPS and out is not None:
        return float(WINDOW_OPS[name] * out.numel())
    if name in POOL_OPS and out is not None:
        return float(_window_elements(args) * out.numel())
    if name in ADAPTIVE_POOL_OPS and first_in is not None:
        return float(first_in.numel())
    if name in GRAD_WINDOW_OPS and first_in is not None:
        return float(GRAD_WINDOW_OPS[name] * first_in.numel())
    if torch.Tag.pointwise in func.tags or name in EXTRA_POINTWISE:
        return float(sum(o.numel() for o in outs))
    return None
