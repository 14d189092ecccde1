"""Extraction fixtures: a few small models extracted once per session (offline, CPU)."""

from __future__ import annotations

import os
import socket

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


@pytest.fixture
def unreachable_hub(monkeypatch, tmp_path):
    """The hub at a local port nothing listens on (connecting is refused at once), an empty HuggingFace
    cache, and HF_HUB_OFFLINE unset: an offline machine whose user did not say so."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    return f"127.0.0.1:{port}"


@pytest.fixture(autouse=True)
def _fresh_hub_answer():
    """The hub's reachability is remembered per process; each test that changes the environment asks anew."""
    from solbench.extract import hub

    hub.reach.cache_clear()
    yield
    hub.reach.cache_clear()
