"""Extraction fixtures: a few small models extracted once per session (offline, CPU)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def qwen_small():
    """Qwen3-0.6B: dense GQA with QK-norm, validated against its transformers modules."""
    from solbench.extract.pipeline import extract_model

    return extract_model("Qwen/Qwen3-0.6B", use_hub=False)


@pytest.fixture(scope="session")
def gemma_small():
    """Gemma-3-1B: sliding-window + full layers, (1 + w) norms, sandwich norms, scaled embedding."""
    from solbench.extract.pipeline import extract_model

    return extract_model("google/gemma-3-1b-pt", use_hub=False)


@pytest.fixture(scope="session")
def deepseek_v2_lite():
    """DeepSeek-V2-Lite: MLA with complex RoPE and a full-rank query, a dense layer and a MoE layer with shared
    experts (validated with narrowed MLP and expert widths)."""
    from solbench.extract.pipeline import extract_model

    return extract_model("deepseek-ai/DeepSeek-V2-Lite", use_hub=False)
