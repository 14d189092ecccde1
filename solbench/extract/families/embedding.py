"""Model edges: the token embedding (plain or scaled), the LM head, and the ViT patch embedding."""

from __future__ import annotations

from torch import nn

from solbench.extract.draft import Arg, Check, Draft, fmt_float, name_float


def embedding_draft(module: nn.Module, dtype: str = "bfloat16") -> Draft:
    vocab, hidden = module.weight.shape
    scale = getattr(module, "scalar_embed_scale", None)
    if scale is None and hasattr(module, "embed_scale"):
        scale = float(module.embed_scale) if module.embed_scale.device.type != "meta" else None
    if scale is not None and float(scale) != 1.0:
        name = f"scaled_embedding_v{vocab}_h{hidden}_scale{name_float(float(scale))}"
        consts = f"EMBED_SCALE = {float(scale)!r}\n\n\n"
        body = ("    # the scale is rounded to the table's dtype before multiplying\n"
                "    return F.embedding(input_ids, weight) * torch.tensor(EMBED_SCALE, dtype=weight.dtype)")
        desc = f"Token embedding lookup scaled by {fmt_float(float(scale))} (vocab {vocab}, hidden {hidden})."
    else:
        name = f"embedding_v{vocab}_h{hidden}"
        consts = ""
        body = "    return F.embedding(input_ids, weight)"
        desc = f"Token embedding lookup (vocab {vocab}, hidden {hidden}): a gather of rows."
    code = f'''{consts}@torch.no_grad()
def run(input_ids, weight):
    """input_ids: [num_tokens] -> [num_tokens, hidden]."""
{body}
'''
    return Draft(
        name=name, op_type="embedding", description=desc,
        axes={"num_tokens": ("var", "Tokens"), "vocab_size": ("const", vocab, "Vocabulary"),
              "hidden_size": ("const", hidden, "Model width")},
        inputs=[Arg("input_ids", ("num_tokens",), "int64", "Token ids", init="token_ids", high="vocab_size"),
                Arg("weight", ("vocab_size", "hidden_size"), dtype, "Embedding table")],
        outputs=[Arg("output", ("num_tokens", "hidden_size"), dtype, "Embeddings")],
        code=code, shapes="tokens",
        check=Check("embed", {"weight": "weight"}, lambda m, inp: {"output": m(inp["input_ids"])},
                    {"num_tokens": 7}),
    )


def lm_head_draft(module: nn.Module, dtype: str = "bfloat16") -> Draft:
    vocab, hidden = module.weight.shape
    bias = module.bias is not None
    code = f'''@torch.no_grad()
def run(hidden_states, weight{", bias" if bias else ""}):
    """hidden_states: [num_tokens, hidden] -> logits [num_tokens, vocab]."""
    return F.linear(hidden_states, weight{", bias" if bias else ""})
'''
    inputs = [Arg("hidden_states", ("num_tokens", "hidden_size"), dtype, "Final hidden states (after the final norm)"),
              Arg("weight", ("vocab_size", "hidden_size"), dtype, "Output embedding", init="weight",
                  fan_in="hidden_size")]
    params = {"weight": "weight"}
    if bias:
        inputs.append(Arg("bias", ("vocab_size",), dtype, "Output bias", init="bias"))
        params["bias"] = "bias"
    return Draft(
        name=f"lm_head_v{vocab}_h{hidden}{'_bias' if bias else ''}", op_type="lm_head",
        description=f"LM head: project hidden states (width {hidden}) to logits over a vocabulary of {vocab}.",
        axes={"num_tokens": ("var", "Tokens"), "vocab_size": ("const", vocab, "Vocabulary"),
              "hidden_size": ("const", hidden, "Model width")},
        inputs=inputs,
        outputs=[Arg("logits", ("num_tokens", "vocab_size"), dtype, "Logits")],
        code=code, shapes="logits",
        check=Check("head", params, lambda m, inp: {"logits": m(inp["hidden_states"])}, {"num_tokens": 7}),
    )


def patch_embedding_draft(embeddings: nn.Module, hf_cfg, dtype: str = "bfloat16") -> Draft:
    """ViT-style: conv patchify, prepend the class token, add position embeddings."""
    conv = embeddings.patch_embeddings.projection
    hidden, channels, patch, _ = conv.weight.shape
    image = hf_cfg.image_size
    tokens = (image // patch) ** 2 + 1
    code = f'''PATCH = {patch}


@torch.no_grad()
def run(pixel_values, patch_weight, patch_bias, cls_token, position_embeddings):
    """pixel_values: [batch, channels, image, image] -> [batch, 1 + patches, hidden]."""
    x = F.conv2d(pixel_values, patch_weight, patch_bias, stride=PATCH)
    x = x.flatten(2).transpose(1, 2)
    cls = cls_token.expand(x.shape[0], -1, -1)
    return torch.cat((cls, x), dim=1) + position_embeddings
'''

    def call(m, inp):
        return {"output": m(inp["pixel_values"])}

    return Draft(
        name=f"patch_embedding_img{image}_p{patch}_c{channels}_h{hidden}", op_type="patch_embedding",
        description=f"ViT patch embedding: {patch}x{patch} patches of a {image}x{image} image with {channels} "
                    f"channels projected to {hidden}, a class token prepended and position embeddings added.",
        axes={"batch_size": ("var", "Images"), "channels": ("const", channels, "Image channels"),
              "image_size": ("const", image, "Image height and width"), "patch": ("const", patch, "Patch size"),
              "hidden_size": ("const", hidden, "Model width"), "num_tokens": ("const", tokens, "Patches + 1")},
        inputs=[Arg("pixel_values", ("batch_size", "channels", "image_size", "image_size"), dtype, "Images"),
                Arg("patch_weight", ("hidden_size", "channels", "patch", "patch"), dtype, "Patch projection",
                    init="weight", fan_in=str(channels * patch * patch)),
                Arg("patch_bias", ("hidden_size",), dtype, "Patch projection bias", init="bias"),
                Arg("cls_token", ("1", "1", "hidden_size"), dtype, "Class token"),
                Arg("position_embeddings", ("1", "num_tokens", "hidden_size"), dtype, "Position embeddings")],
        outputs=[Arg("output", ("batch_size", "num_tokens", "hidden_size"), dtype, "Token embeddings")],
        code=code, shapes="images",
        check=Check("model:embeddings", {"patch_weight": "patch_embeddings.projection.weight",
                                         "patch_bias": "patch_embeddings.projection.bias",
                                         "cls_token": "cls_token", "position_embeddings": "position_embeddings"},
                    call, {"batch_size": 2}),
    )

