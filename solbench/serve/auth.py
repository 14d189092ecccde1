"""Who may call the service: anyone on this host by default (it listens on loopback only); a token, checked
on every request, before it may listen on anything else.

The token never goes on a command line (`/proc/<pid>/cmdline` is readable by every process of the host, a
solution's worker included): it comes from a file (`--token-file`, `-` for stdin) or `$SOLBENCH_TOKEN`, which
the service removes from its environment before any worker starts (and `orchestrator.process` drops from every
worker's). `--token VALUE` still works, with a warning, for old scripts.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import stat
import sys
from pathlib import Path

TOKEN_ENV = "SOLBENCH_TOKEN"  # where `solbench serve` and `solbench submit` also read the token (not in `ps`)
ARGV_TOKEN_WARNING = ("--token VALUE is deprecated: the token is readable in /proc/<pid>/cmdline by every process "
                      f"of this host; use --token-file FILE (or -: stdin) or ${TOKEN_ENV}")


def read_token(argv_token: str | None, token_file: str | None, warn=None) -> str | None:
    """The token from `--token-file` (a path, or "-" for stdin's first line), else `--token` (deprecated: `warn`
    is told), else $SOLBENCH_TOKEN; ValueError (a one-line reason) for an unreadable or empty file, or for both
    a file and a value. The variable is removed from this process's environment either way, so that no child
    inherits it."""
    from_env = os.environ.get(TOKEN_ENV) or None
    scrub_environment(TOKEN_ENV)
    if token_file is not None and argv_token is not None:
        raise ValueError("give the token once: --token-file or --token, not both")
    if token_file is not None:
        return _token_from_file(token_file, warn)
    if argv_token is not None:
        if warn is not None:
            warn(ARGV_TOKEN_WARNING)
        return argv_token
    return from_env


def scrub_environment(name: str) -> None:
    """Remove `name` from this process's environment, and overwrite its value where the kernel shows the
    environment the process started with (`/proc/<pid>/environ` reads that memory, which unsetenv leaves as it
    was). Best effort: where libc cannot be reached, the variable is only removed."""
    if name not in os.environ:
        return
    prefix = f"{name}=".encode()
    try:
        import ctypes

        environ = ctypes.POINTER(ctypes.c_void_p).in_dll(ctypes.CDLL(None), "environ")
        index = 0
        while environ[index]:
            address = environ[index]
            if ctypes.string_at(address, len(prefix)) == prefix:
                length = len(ctypes.string_at(address))
                ctypes.memset(address + len(prefix), ord("x"), length - len(prefix))
            index += 1
    except (OSError, ValueError, AttributeError):
        pass
    os.environ.pop(name, None)


def _token_from_file(token_file: str, warn) -> str:
    try:
        if token_file == "-":
            text = sys.stdin.readline()
        else:
            path = Path(token_file)
            mode = path.stat().st_mode
            if mode & (stat.S_IRWXG | stat.S_IRWXO) and warn is not None:
                warn(f"the token file {token_file} is readable by other users (chmod 600 it)")
            text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the token file {token_file}: {getattr(exc, 'strerror', None) or exc}") from None
    lines = text.strip().splitlines()
    if not lines or not lines[0].strip():
        raise ValueError(f"the token file {token_file} is empty")
    return lines[0].strip()


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
