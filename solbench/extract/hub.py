"""Is the HuggingFace hub reachable? Decided once per process, in at most a few seconds.

Without this, every hub call on an offline machine retries five times with back-off (~23 s) before it
gives up, and `extract` pays that for each model. One short TCP connect to the hub (or to the proxy that
would carry the request) answers the question; after a failure only the local cache is read.
`HF_HUB_OFFLINE=1` answers it without a probe.
"""

from __future__ import annotations

import functools
import os
import socket
import threading
import urllib.request
from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_ENDPOINT = "https://huggingface.co"
PROBE_TIMEOUT_S = 3.0  # name lookup and connect together; a reachable hub answers in well under a second
_TRUE = ("1", "true", "yes", "on")


@dataclass(frozen=True)
class HubReach:
    """Whether hub requests can be made; `reason` says why not, in words for the user."""

    online: bool
    endpoint: str
    reason: str = ""


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")


@functools.cache
def reach() -> HubReach:
    """The hub's reachability for this process (probed on first use, then remembered)."""
    url = endpoint()
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in _TRUE:
        return HubReach(False, url, "HF_HUB_OFFLINE is set")
    target = _connect_target(url)
    if target is None:
        return HubReach(False, url, f"HF_ENDPOINT {url!r} has no host")
    error = _probe(*target)
    if error is None:
        return HubReach(True, url)
    return HubReach(False, url, f"{target[0]}:{target[1]} is not reachable: {error}")


def _connect_target(url: str) -> tuple[str, int] | None:
    """Host and port a request to `url` connects to: the proxy's when one applies (as httpx does)."""
    parts = urlsplit(url)
    if not parts.hostname:
        return None
    scheme = parts.scheme or "https"
    proxy = urllib.request.getproxies().get(scheme)
    if proxy and not urllib.request.proxy_bypass(parts.hostname):
        proxy_parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if proxy_parts.hostname:
            return proxy_parts.hostname, proxy_parts.port or 80
    return parts.hostname, parts.port or (443 if scheme == "https" else 80)


def _probe(host: str, port: int) -> str | None:
    """None when a TCP connection opens within PROBE_TIMEOUT_S, else what went wrong.

    The name lookup has no timeout of its own (a dead DNS server can hold it for 10 s or more), so the
    probe runs in a daemon thread that is abandoned at the deadline."""
    outcome: list[str | None] = []

    def attempt() -> None:
        try:
            with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
                outcome.append(None)
        except OSError as exc:
            outcome.append(exc.strerror or str(exc) or type(exc).__name__)

    worker = threading.Thread(target=attempt, name="hub-probe", daemon=True)
    worker.start()
    worker.join(PROBE_TIMEOUT_S)
    if not outcome:
        return f"no answer in {PROBE_TIMEOUT_S:g} s"
    return outcome[0]
