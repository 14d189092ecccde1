"""Who may call the service: anyone on this host by default (it listens on loopback only); a token, checked
on every request, before it may listen on anything else."""

from __future__ import annotations

import hmac
import ipaddress
import secrets

TOKEN_ENV = "SOLBENCH_TOKEN"  # where `solbench serve` and `solbench submit` also read the token (not in `ps`)


def is_loopback(host: str) -> bool:
    """Whether `host` (what the service binds) is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind_refusal(host: str, token: str | None) -> str | None:
    """Why the service must not listen on `host` with this token; None when it may."""
    if token is not None and len(token) < 16:
        return "the token must be at least 16 characters (e.g. python -c 'import secrets; print(secrets.token_hex(16))')"
    if not is_loopback(host) and not token:
        return (f"listening on {host} (beyond this machine) needs a token: --token or ${TOKEN_ENV} "
                f"(clients send it as 'Authorization: Bearer TOKEN')")
    return None


def authorised(header: str | None, token: str | None) -> bool:
    """Whether a request's Authorization header carries the token (always, where the service has none)."""
    if not token:
        return True
    if not header or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[len("Bearer "):].strip().encode(), token.encode())


def new_token() -> str:
    return secrets.token_hex(16)
