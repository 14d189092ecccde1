"""Workers forked from a pre-imported template (a "zygote") instead of spawned (issue 49: the start-up floor).

A spawned worker spends most of its start importing torch and the harness (benchmarks/startup_profile.py:
about 1.7 s of 2.0 s on a CPU). A template (`python -P -m solbench.worker` with SOLBENCH_ZYGOTE_FD,
worker/zygote.py) pays that once per orchestrator and environment, then forks each worker in milliseconds.
What a fork must not carry over is kept out: the template never runs solution code and never sees a
worker's data; it makes no CUDA context, loads no CUDA driver and starts no thread pool (it checks, and
refuses); each worker is forked from it afresh and gets, through its own descriptors, the state a spawned
worker has (worker/zygote.py `become_worker`), then enters the same sandbox at the same point.

One template per *import environment*: the worker's environment without what differs per worker and is
read only after the fork (its folders and channels). Everything else (thread counts, malloc settings,
CUDA_VISIBLE_DEVICES, PYTHONPATH, flags) is what the template imported under, so nothing read at import
differs from a spawned worker's.

A forked worker is the template's child: the template dies with the orchestrator (parent-death signal from
a thread that lives as long as the process, and a watch of its parent), the worker with the template.
The template keeps each ended worker unreaped until the orchestrator has killed what was left of its tree
(`ForkedProcess.release`), so a worker's pid is never reused under the orchestrator's kill.

`SOLBENCH_WORKER_START=spawn` spawns every worker as before. If a template cannot start or stops, the
orchestrator says so once on stderr and spawns.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

START_ENV = "SOLBENCH_WORKER_START"  # "spawn": every worker a fresh interpreter; "fork" or unset: the template
# GPU workers are spawned unless SOLBENCH_WORKER_START=fork: on an H200 a forked GPU worker started with 18 OS
# threads where a spawned one has 3 (tests/runner/test_forked_workers.py[cuda]); until that is understood, the
# state a GPU solution starts in is the spawned one. True: GPU workers forked too.
FORK_ON_GPU = False
# What a worker's environment holds per worker, read by the worker only after the fork (the test
# tests/runner/test_forked_workers.py compares what a forked and a spawned worker see).
PER_WORKER_ENV = frozenset({"SOLBENCH_CHANNEL_FD", "SOLBENCH_ALARM_FD", "SOLBENCH_SANDBOX", "TMPDIR", "TRITON_CACHE_DIR",
                            "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH", "XDG_CACHE_HOME", "CUTE_DSL_CACHE_DIR"})
# Templates one orchestrator keeps (each a few hundred MB): one per import environment, and a long-lived
# orchestrator (a test session, a service, an Evaluator) meets many. Past this many, starting another retires
# the least recently used one that has no worker alive (its workers die with it); a retired environment
# starts a new template when it is needed again.
MAX_TEMPLATES = 4
# How every worker process and template starts: a fresh interpreter, no script or cwd folder on sys.path
WORKER_COMMAND = (sys.executable, "-P", "-m", "solbench.worker")
READY_TIMEOUT_S = 300.0  # the template's imports, on a machine where every GPU's workers start at once
_templates: dict[tuple, Template] = {}
_templates_lock = threading.Lock()
_said: list[str] = []


def _forget_in_child() -> None:
    """A process forked from this one (a pool process) has none of these templates' reading threads."""
    _templates.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def wanted(device: str) -> bool:
    """Whether a worker for `device` is forked from a template (Linux only)."""
    way = os.environ.get(START_ENV, "").strip().lower()
    if way == "spawn" or not sys.platform.startswith("linux"):
        return False
    return way == "fork" or not device.startswith("cuda") or FORK_ON_GPU


def say_once(why: str) -> None:
    """The one line a run prints when workers are spawned instead: never a crash."""
    if not _said:
        _said.append(why)
        print(f"solbench: workers are spawned, not forked from a template ({why})", file=sys.stderr, flush=True)


def launch(env: dict[str, str], cwd: str, channel: socket.socket, alarm: socket.socket, folder: str) -> ForkedProcess:
    """Start a worker with `env` in `cwd`, whose channel and alarm ends are `channel` and `alarm` (the
    caller closes its own copies). Returns at once: the fork happens when the template is ready, and
    where it cannot, the worker is spawned. `folder`: the run's private folder, where a template keeps its own."""
    key = tuple(sorted((k, v) for k, v in env.items() if k not in PER_WORKER_ENV))
    with _templates_lock:
        template = _templates.get(key)
        if template is None:  # a failed template stays: its workers are spawned, and it said why once
            _retire_idle(MAX_TEMPLATES - 1)
            template = _templates[key] = Template(dict(key), folder)
        template.used = time.monotonic()
    process = ForkedProcess(env, cwd, channel, alarm)
    template.submit(process)
    return process


def _retire_idle(keep: int) -> None:
    """Retire the least recently used templates with no worker alive until at most `keep` are live
    (called under `_templates_lock`)."""
    live = sorted((t.used, key) for key, t in _templates.items() if t.state in ("starting", "ready"))
    for _, key in live[:max(0, len(live) - keep)]:
        if _templates[key].retire():
            del _templates[key]


class ForkedProcess:
    """A worker forked by a template (or spawned where it could not be), seen as a `subprocess.Popen`: `pid`,
    `stdout`, `poll`, `wait`; `release` once its tree has been killed."""

    def __init__(self, env: dict[str, str], cwd: str, channel: socket.socket, alarm: socket.socket):
        self.env, self.cwd = env, cwd
        read, write = os.pipe()
        self.stdout = open(read, "rb")  # noqa: SIM115 - the caller's reader thread reads it to the end
        self._setup, setup_child = socket.socketpair()
        # the worker's own ends, held until forked or spawned: [channel, alarm, output, setup]
        self.fds = [os.dup(channel.fileno()), os.dup(alarm.fileno()), write, setup_child.detach()]
        self._pid: int | None = None
        self.returncode: int | None = None
        self.template: Template | None = None
        self._popen: subprocess.Popen | None = None
        self._launched, self._exited = threading.Event(), threading.Event()

    @property
    def pid(self) -> int | None:
        self._launched.wait(READY_TIMEOUT_S + 60)
        return self._pid

    def forked(self, pid: int, template: Template) -> None:
        """The template forked it: its environment and folder go through its setup socket."""
        self._close_fds()
        self._pid, self.template = pid, template
        try:
            self._setup.sendall(json.dumps({"env": self.env, "cwd": self.cwd}).encode())
        except OSError:  # it died already: its exit is reported like any other
            pass
        self._setup.close()
        self._launched.set()

    def spawn(self) -> None:
        """Start it the way `orchestrator/process.py` always has, with the same descriptors."""
        env = dict(self.env, SOLBENCH_CHANNEL_FD=str(self.fds[0]), SOLBENCH_ALARM_FD=str(self.fds[1]))
        try:
            self._popen = subprocess.Popen(WORKER_COMMAND, cwd=self.cwd, env=env,
                                           stdin=subprocess.DEVNULL, stdout=self.fds[2], stderr=self.fds[2],
                                           pass_fds=self.fds[:2], start_new_session=True)
            self._pid = self._popen.pid
        except OSError as exc:
            self.returncode = 1
            os.write(self.fds[2], f"solbench: the worker could not be started: {exc}\n".encode())
            self._exited.set()
        self._close_fds()
        self._setup.close()
        self._launched.set()

    def ended(self, code: int) -> None:
        self.returncode = code
        self._exited.set()

    def poll(self) -> int | None:
        if self._popen is not None:
            return self._popen.poll()
        return self.returncode if self._exited.is_set() else None

    def wait(self, timeout: float | None = None) -> int:
        if self._popen is not None:
            return self._popen.wait(timeout)
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(["solbench.worker (forked)"], timeout or 0)
        return self.returncode  # type: ignore[return-value]

    def release(self) -> None:
        """Let the template reap it (after the orchestrator has killed its tree: the pid stayed reserved)."""
        if self.template is not None and self._exited.is_set() and self._pid is not None:
            self.template.send({"reap": self._pid})

    def _close_fds(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []


class Template:
    """One template process, started and read by a thread of its own that lives as long as this process:
    the template's parent-death signal follows the thread that started it."""

    def __init__(self, env: dict[str, str], run_folder: str):
        self.env, self.run_folder = env, run_folder
        self.state = "starting"
        self._lock = threading.Lock()
        self._waiting: list[ForkedProcess] = []
        self._tokens = itertools.count()
        self._pending: dict[int, ForkedProcess] = {}  # fork request token -> process
        self._running: dict[int, ForkedProcess] = {}  # pid -> process
        self.control: socket.socket | None = None
        self.process: subprocess.Popen | None = None
        self.folder = ""
        self.used = time.monotonic()
        threading.Thread(target=self._run, name="solbench-worker-template", daemon=True).start()

    def retire(self) -> bool:
        """End an idle ready template (no worker waiting, being forked or alive); False if it is not idle."""
        with self._lock:
            if self.state != "ready" or self._waiting or self._pending or self._running:
                return False
            self.state = "retired"
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        return True

    def submit(self, process: ForkedProcess) -> None:
        with self._lock:
            if self.state == "starting":
                self._waiting.append(process)
                return
            if self.state == "ready":
                self._request(process)
                return
        process.spawn()

    def send(self, message: dict, fds: list[int] | None = None) -> bool:
        control = self.control
        try:
            if control is None:
                return False
            socket.send_fds(control, [json.dumps(message).encode()], fds or [])
            return True
        except OSError:
            return False

    def _request(self, process: ForkedProcess) -> None:
        token = next(self._tokens)
        self._pending[token] = process
        if not self.send({"fork": token}, process.fds):
            self._pending.pop(token)
            process.spawn()  # from this thread, as ever (the reader sees the template gone)

    def _run(self) -> None:
        """Start the template, then read it until it ends. The thread never returns: the workers it spawned
        in the template's stead die with the thread that started them."""
        try:
            self._start()
        except Exception as exc:  # noqa: BLE001 - any failure: spawned workers instead, said once
            self._fail(f"the template did not start: {exc}{self._last_words()}")
            threading.Event().wait()
        while True:
            try:
                data = self.control.recv(4096) if self.control is not None else b""
            except OSError:
                data = b""
            if not data:
                if self.state != "retired":  # retired on purpose: nothing to say, nothing waits on it
                    self._fail(f"the template ended{self._last_words()}")
                threading.Event().wait()
            try:
                self._handle(json.loads(data))
            except Exception as exc:  # noqa: BLE001 - this thread must live on: the template dies with it
                say_once(f"a message from the template was not understood: {exc!r}")

    def _last_words(self) -> str:
        """The last line the template wrote on its stderr (a traceback's), if any."""
        try:
            with open(os.path.join(self.folder, "stderr"), errors="replace") as f:
                lines = [line.strip() for line in f if line.strip()]
        except OSError:
            return ""
        return f": {lines[-1][:300]}" if lines else ""

    def _start(self) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(self.env, SOLBENCH_ZYGOTE_FD=str(theirs.fileno()), SOLBENCH_ZYGOTE_PARENT=str(os.getpid()))
        self.folder = folder = tempfile.mkdtemp(prefix="template_", dir=self.run_folder)
        for name in sorted(PER_WORKER_ENV - {"SOLBENCH_CHANNEL_FD", "SOLBENCH_ALARM_FD", "SOLBENCH_SANDBOX"}):
            env[name] = os.path.join(folder, name.lower())  # anything written at import lands in its own folder
            os.makedirs(env[name], mode=0o700)
        with open(os.path.join(folder, "stderr"), "wb") as stderr:
            self.process = subprocess.Popen(WORKER_COMMAND, cwd=folder, env=env,
                                            stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr,
                                            pass_fds=[theirs.fileno()], start_new_session=True)
        theirs.close()
        mine.settimeout(READY_TIMEOUT_S)
        data = mine.recv(4096)
        mine.settimeout(None)
        ready = json.loads(data) if data else {}
        if "ready" not in ready or ready.get("hazards"):
            self.process.kill()
            raise RuntimeError("; ".join(ready.get("hazards") or ["it exited before it was ready"]))
        with self._lock:
            self.control, self.state = mine, "ready"
            waiting, self._waiting = self._waiting, []
            for process in waiting:
                self._request(process)

    def _handle(self, message: dict) -> None:
        with self._lock:
            if "forked" in message:
                process = self._pending.pop(message["forked"])
                self._running[message["pid"]] = process
                process.forked(message["pid"], self)
            elif "failed" in message:
                say_once(f"the template refused a fork: {message.get('why')}")
                self._pending.pop(message["failed"]).spawn()  # from this thread, which lives on
            elif "exited" in message:
                process = self._running.pop(message["exited"], None)
                if process is not None:
                    process.ended(int(message["code"]))

    def _fail(self, why: str) -> None:
        """Spawn what was waiting; the template's running workers die with it (their parent-death signal)."""
        say_once(why)
        with self._lock:
            self.state = "failed"
            left = self._waiting + list(self._pending.values())
            running = list(self._running.values())
            self._waiting, self._pending, self._running = [], {}, {}
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        for process in left:
            process.spawn()
        for process in running:
            process.template = None  # nothing to reap: orphans go to init, which reaps them
            process.ended(-9)
