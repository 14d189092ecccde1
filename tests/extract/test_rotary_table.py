"""The rotary-table template: positions in, cos/sin out, equal to transformers' rotary module bit for bit.

The default RoPE computes its inverse frequencies from theta (as the module's init does); a scaled RoPE
(llama3) takes the module's frequencies as an input; one that moves with the sequence is refused.
"""

from __future__ import annotations

import pytest
import torch

from solbench.extract.families import rotary
from solbench.spec.errors import SpecError

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding  # noqa: E402

SMALL = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1, "max_position_embeddings": 4096}


def _module(rope_parameters: dict) -> torch.nn.Module:
    holder = torch.nn.Module()
    holder.rotary_emb = LlamaRotaryEmbedding(LlamaConfig(**SMALL, rope_parameters=rope_parameters))
    return holder


def _run(draft, **inputs):
    namespace: dict = {}
    exec(compile(draft.reference(), draft.name, "exec"), namespace)
    return namespace["run"](**inputs)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_default_rope_table_from_theta_equals_the_module(dtype):
    model = _module({"rope_type": "default", "rope_theta": 500000.0})
    path, module = rotary.rotary_module(model)
    draft = rotary.rotary_table_draft(path, module, dtype)
    assert path == "rotary_emb" and draft.name.startswith("rope_table_d16_theta500000_p")
    assert [a.name for a in draft.inputs] == ["position_ids"]
    positions = torch.randint(0, 4096, (2, 7))
    want = draft.check.call(module, {"position_ids": positions})
    cos, sin = _run(draft, position_ids=positions)
    assert cos.dtype == getattr(torch, dtype)
    assert torch.equal(cos, want["cos"]) and torch.equal(sin, want["sin"])


def test_scaled_rope_takes_its_frequencies_as_an_input():
    model = _module({"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 1024})
    path, module = rotary.rotary_module(model)
    draft = rotary.rotary_table_draft(path, module)
    assert draft.name.startswith("rope_table_llama3_d16") and [a.name for a in draft.inputs][-1] == "inv_freq"
    positions = torch.randint(0, 4096, (2, 7))
    want = draft.check.call(module, {"position_ids": positions})
    cos, sin = _run(draft, position_ids=positions, inv_freq=module.inv_freq)
    assert torch.equal(cos, want["cos"]) and torch.equal(sin, want["sin"])


def test_a_rope_that_moves_with_the_sequence_is_refused():
    model = _module({"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0})
    with pytest.raises(SpecError, match="dynamic"):
        rotary.rotary_table_draft(*rotary.rotary_module(model))


def test_a_table_of_one_angle_per_pair_is_left_to_the_generic_capture():
    """gpt-oss's rotary module returns cos/sin as wide as inv_freq, not the rotate-half layout."""
    class HalfTable(torch.nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config, self.rope_type = config, "default"
            self.register_buffer("inv_freq", torch.ones(8), persistent=False)

        def forward(self, x, position_ids):
            freqs = position_ids[..., None].float() * self.inv_freq.to(x.device)
            return freqs.cos(), freqs.sin()

    holder = torch.nn.Module()
    holder.rotary_emb = HalfTable(LlamaConfig(**SMALL))
    with pytest.raises(SpecError, match="8 wide, not the rotate-half 16"):
        rotary.rotary_table_draft(*rotary.rotary_module(holder))
