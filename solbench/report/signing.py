"""Trace lines signed by the orchestrator that wrote them: a line nobody with the file's key wrote (one a
solution appended, a forged PASSED) is refused on resume and never reaches a report.

Each trace file has its own random key, kept under the user's state folder (`$SOLBENCH_STATE_DIR`, else
`$XDG_STATE_HOME/solbench`, else `~/.local/state/solbench`), folder 0700, file 0600; never beside the
traces. A line is the trace's JSON object with `"signature"` (HMAC-SHA256 of the bytes before it) as its
last member, so checking never re-serialises anything.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from pathlib import Path

STATE_ENV = "SOLBENCH_STATE_DIR"
KEY_BYTES = 32
_SIGNED = re.compile(r',"signature":"([0-9a-f]{64})"\}$')


def state_dir() -> Path:
    if os.environ.get(STATE_ENV):
        return Path(os.environ[STATE_ENV])
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "solbench"


def key_path(trace_path: Path) -> Path:
    """Where the key of this trace file lives (by the file's real path)."""
    digest = hashlib.sha256(str(Path(trace_path).resolve()).encode()).hexdigest()[:32]
    return state_dir() / "trace-keys" / f"{digest}.key"


def load_key(trace_path: Path, create: bool) -> bytes | None:
    """The file's key; with `create`, a new one when it has none."""
    path = key_path(trace_path)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        if not create:
            return None
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path.parent, 0o700)
    key = os.urandom(KEY_BYTES)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    return key


def _mac(key: bytes, body: str) -> str:
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


def sign(key: bytes, body: str) -> str:
    """`body` (one JSON object, no newline) with its signature as the last member."""
    assert body.endswith("}")
    return f'{body[:-1]},"signature":"{_mac(key, body)}"}}'


def verify(key: bytes, line: str) -> bool:
    """Whether `line` is a JSON object this key signed, byte for byte."""
    line = line.rstrip("\n")
    match = _SIGNED.search(line)
    if match is None:
        return False
    body = line[:match.start()] + "}"
    return hmac.compare_digest(match.group(1), _mac(key, body))


def is_signed(line: str) -> bool:
    return _SIGNED.search(line.rstrip("\n")) is not None
