"""A `solbench serve` started as a child process, its URL read from the line it prints once it listens: for
scripts that bring their own service (a CI job, benchmarks/, the tests)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

from solbench.serve.auth import TOKEN_ENV

READY_MARK = "listening on "  # what service.serve prints once the port is open, before the URL


class ServiceProcess:
    """`solbench serve --port 0 --folder FOLDER ARGS...` as a child; `url` once it listens (up to `start_wait_s`,
    else RuntimeError with its stderr's end). The token, if any, goes by its stdin, never the command line or
    the environment (both readable in /proc)."""

    def __init__(self, folder: str | Path, *args: str, token: str | None = None, start_wait_s: float = 300.0,
                 env: dict[str, str] | None = None, cwd: str | Path | None = None):
        self.folder = Path(folder)
        env = dict(env if env is not None else os.environ)
        env.pop(TOKEN_ENV, None)
        token_args = ["--token-file", "-"] if token else []
        command = [sys.executable, "-m", "solbench", "serve", "--port", "0", "--folder", str(self.folder),
                   *token_args, *args]
        self.proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.PIPE, text=True, start_new_session=True)
        if token:
            self.proc.stdin.write(token + "\n")  # by a pipe: neither its command line nor its environment
        self.proc.stdin.close()
        lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=lambda: [lines.put(line) for line in self.proc.stdout], daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()
        try:
            line = lines.get(timeout=start_wait_s)
        except queue.Empty:
            self.kill()
            raise RuntimeError(f"solbench serve did not start: {''.join(self.stderr)[-2000:]}") from None
        if READY_MARK not in line:
            self.kill()
            raise RuntimeError(f"solbench serve printed {line!r}: {''.join(self.stderr)[-2000:]}")
        self.url = line.split(READY_MARK)[1].split()[0]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, timeout_s: float = 120.0) -> int:
        """SIGTERM (a clean stop: running submissions interrupted, finished traces kept); its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def __enter__(self) -> ServiceProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
