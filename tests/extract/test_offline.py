"""An unreachable hub is found once, quickly, and said: "offline: ..."; no retries with back-off."""

from __future__ import annotations

import socket
import threading

import pytest

from solbench.extract import hub
from tests.test_cli import solbench

RETRY_NOTES = ("Retrying in", "[Retry ")  # what huggingface-hub prints before each back-off


def _listening_port() -> socket.socket:
    """A local server that accepts connections (and closes them) until it is closed."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def serve() -> None:
        try:
            while True:
                server.accept()[0].close()
        except OSError:
            pass

    threading.Thread(target=serve, daemon=True).start()
    return server


def test_probe_says_why_and_is_remembered(unreachable_hub, monkeypatch):
    first = hub.reach()
    assert not first.online and first.reason == f"{unreachable_hub} is not reachable: Connection refused"
    with _listening_port() as server:  # the hub comes back: this process keeps its first answer
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        assert hub.reach() is first
        hub.reach.cache_clear()
        assert hub.reach().online


def test_offline_flag_needs_no_probe(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_ENDPOINT", "http://does-not-resolve.invalid")
    assert hub.reach() == hub.HubReach(False, "http://does-not-resolve.invalid", "HF_HUB_OFFLINE is set")


def test_a_proxy_is_probed_instead_of_the_hub(unreachable_hub, monkeypatch):
    with _listening_port() as proxy:
        monkeypatch.setenv("HF_ENDPOINT", "https://does-not-resolve.invalid")
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy.getsockname()[1]}")
        monkeypatch.setenv("NO_PROXY", "")
        assert hub.reach().online


def test_extract_offline_says_so_once_and_does_not_retry(unreachable_hub, tmp_path):
    out, refs = tmp_path / "defs", tmp_path / "refs"
    result = solbench("extract", "--model", "Qwen/Qwen3-0.6B", "--model", "meta-llama/Llama-3.2-1B", "--no-validate",
                      "-o", str(out), "--references", str(refs))
    assert result.returncode == 0, result.stderr
    err = " ".join(result.stderr.split())
    assert err.count("offline: using shipped configs") == 1, err
    assert f"{unreachable_hub} is not reachable: Connection refused" in err
    assert err.count("(config: shipped)") == 2
    assert not any(note in result.stderr for note in RETRY_NOTES), result.stderr
    assert (out / "problem_defs" / "hf" / "rmsnorm_h1024_eps1e-06" / "definition.json").is_file()


def test_pull_offline_says_so_and_names_the_way_out(unreachable_hub, tmp_path):
    result = solbench("pull", "nvidia/SOL-ExecBench", "-o", str(tmp_path / "out"))
    assert result.returncode == 2
    err = " ".join(result.stderr.split())
    assert err.startswith("offline: looking for nvidia/SOL-ExecBench in the local HuggingFace cache only"), err
    assert "--from-parquet" in err and "Traceback" not in err
    assert not any(note in result.stderr for note in RETRY_NOTES), result.stderr


def _hub_answers() -> bool:
    try:
        with socket.create_connection(("huggingface.co", 443), timeout=3):
            return True
    except OSError:
        return False


def test_extract_on_this_machine_without_network(monkeypatch, tmp_path):
    """The real thing: the default endpoint, no HF_HUB_OFFLINE, no network (skipped where the hub answers)."""
    if _hub_answers():
        pytest.skip("huggingface.co answers from this machine; the closed-port test covers the offline path")
    for name in ("HF_HUB_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    result = solbench("extract", "--model", "Qwen/Qwen3-0.6B", "--no-validate", "-o", str(tmp_path / "defs"),
                      "--references", str(tmp_path / "refs"))
    assert result.returncode == 0, result.stderr
    err = " ".join(result.stderr.split())
    assert "offline: using shipped configs" in err and "huggingface.co:443 is not reachable" in err
    assert "(config: shipped)" in err and not any(note in result.stderr for note in RETRY_NOTES)
