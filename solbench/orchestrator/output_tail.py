"""The last bytes a worker wrote to its stdout and stderr, and how many there were: a solution that prints
megabytes neither blocks the orchestrator nor fills its memory (orchestrator/process.py drains into it)."""

from __future__ import annotations

import threading
from collections import deque

LOG_CAP_BYTES = 64 * 1024


class OutputTail:
    """Keeps the last `cap` bytes written by the worker; counts the rest."""

    def __init__(self, cap: int = LOG_CAP_BYTES):
        self.cap = cap
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self.total_bytes = 0
        self._lock = threading.Lock()

    def feed(self, chunk: bytes) -> None:
        with self._lock:
            self._chunks.append(chunk)
            self._size += len(chunk)
            self.total_bytes += len(chunk)
            while self._size > self.cap and len(self._chunks) > 1:
                self._size -= len(self._chunks.popleft())

    def mark(self) -> int:
        return self.total_bytes

    def since(self, mark: int, limit: int = 8192) -> str:
        """Text written since `mark`, at most the last `limit` bytes of it."""
        with self._lock:
            data = b"".join(self._chunks)
            new = self.total_bytes - mark
            if new <= 0:
                return ""
            dropped = max(0, new - len(data))
            text = data[-min(new, len(data)):]
        if len(text) > limit:
            dropped += len(text) - limit
            text = text[-limit:]
        out = text.decode("utf-8", "replace")
        return (f"[... {dropped} bytes of output not kept ...]\n" if dropped else "") + out
