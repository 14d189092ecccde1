# solbench: problem=patch_embedding_img224_p16_c3_h1024
"""ViT patch embedding: 16x16 patches of a 224x224 image with 3 channels projected to 1024, a class token prepended and position embeddings added.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch
import torch.nn.functional as F


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["pixel_values"] = torch.randn(a["batch_size"], a["channels"], a["image_size"], a["image_size"], dtype=torch.bfloat16, device=device)
    inputs["patch_weight"] = torch.randn(a["hidden_size"], a["channels"], a["patch"], a["patch"], dtype=torch.bfloat16, device=device).mul_(768 ** -0.5)
    inputs["patch_bias"] = (0.1 * torch.randn(a["hidden_size"], device=device)).to(torch.bfloat16)
    inputs["cls_token"] = torch.randn(1, 1, a["hidden_size"], dtype=torch.bfloat16, device=device)
    inputs["position_embeddings"] = torch.randn(1, a["num_tokens"], a["hidden_size"], dtype=torch.bfloat16, device=device)
    return inputs


PATCH = 16


@torch.no_grad()
def run(pixel_values, patch_weight, patch_bias, cls_token, position_embeddings):
    """pixel_values: [batch, channels, image, image] -> [batch, 1 + patches, hidden]."""
    x = F.conv2d(pixel_values, patch_weight, patch_bias, stride=PATCH)
    x = x.flatten(2).transpose(1, 2)
    cls = cls_token.expand(x.shape[0], -1, -1)
    return torch.cat((cls, x), dim=1) + position_embeddings
