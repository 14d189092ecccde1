# solbench: problem=embedding_v32000_h4096
"""Token embedding lookup (vocab 32000, hidden 4096): a gather of rows.

Extracted by `solbench extract`; edit the extractor, not this file."""

import torch
import torch.nn.functional as F


def get_inputs(axes_and_scalars: dict, device) -> dict[str, torch.Tensor]:
    """Random inputs at realistic scales: weights ~ N(0, 1/fan_in), norm weights near 1, valid indices."""
    a = axes_and_scalars
    inputs = {}
    inputs["input_ids"] = torch.randint(0, a["vocab_size"], (a["num_tokens"],), dtype=torch.int64, device=device)
    inputs["weight"] = torch.randn(a["vocab_size"], a["hidden_size"], dtype=torch.bfloat16, device=device)
    return inputs


@torch.no_grad()
def run(input_ids, weight):
    """input_ids: [num_tokens] -> [num_tokens, hidden]."""
    return F.embedding(input_ids, weight)
