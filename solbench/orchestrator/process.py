"""Worker subprocesses and the private channel to them.

A worker is a fresh `sys.executable` started with `-P` (no script or cwd directory on `sys.path`), or a
fork of a template that has imported torch and the harness (orchestrator/zygote.py; SOLBENCH_WORKER_START=spawn
turns that off), in its own scratch directory and process group. Requests and replies travel over one end of a
socketpair whose file descriptor only the worker inherits; the worker's stdout and stderr go to a
pipe that the orchestrator drains into a bounded ring buffer, so a solution that prints megabytes
(or prints something that looks like a result) neither blocks nor forges anything.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

from solbench.orchestrator import cgroup, cpu_cores, zygote
from solbench.orchestrator.output_tail import OutputTail
from solbench.orchestrator.process_tree import kill_tree
from solbench.protocol import codec
from solbench.protocol import messages as msg

PRIVATE_REFERENCE_CACHE_ENV = "SOLBENCH_PRIVATE_REFERENCE_CACHE"  # set by a service (serve/service.py)
SECRET_ENV = ("SOLBENCH_TOKEN",)  # a service's token: never in a worker's environment (serve/auth.py)
SANDBOX_OFF = "off"  # SOLBENCH_SANDBOX=off in the orchestrator's environment: workers without the OS sandbox
_RUN_FOLDER: list[str] = []


def run_folder() -> str:
    """This orchestrator's private folder (0700, removed at exit): the workers' scratch folders live here,
    out of other users' reach."""
    if not _RUN_FOLDER:
        folder = tempfile.mkdtemp(prefix="solbench_run_")  # created 0700
        _RUN_FOLDER.append(folder)
        atexit.register(shutil.rmtree, folder, True)
    return _RUN_FOLDER[0]


def worker_cache(role: str, scratch: str) -> str:
    """The compiler caches and temporary folder of one worker. The reference role's are kept across runs
    (Triton kernels, Inductor's precompiled headers: seconds to minutes to rebuild) and only the trusted
    reference worker may write them. A solution's live in its own scratch folder and go with it: a cache
    shared by solutions would let one plant compiled kernels that a later solution, or a later run, loads.
    A service sets PRIVATE_REFERENCE_CACHE_ENV: its references may be sent by content (anyone's code), so each
    reference process keeps its caches in its scratch folder, and serves one definition (`reuse_key`)."""
    if role != "reference" or os.environ.get(PRIVATE_REFERENCE_CACHE_ENV) == "1":
        return os.path.join(scratch, "cache")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "solbench", "workers", role)


def sandbox_env(env: dict[str, str], scratch: str, role: str, namespaces: bool = True, cgroup: str = "") -> None:
    """What a worker's sandbox needs (worker/sandbox.py): where it may write (its scratch folder and its
    role's caches), and every cache and temporary folder pointed there.
    `namespaces`: a PID namespace per worker; off for GPU workers, since a legacy CUDA IPC handle cannot be
    opened across PID namespaces (large outputs travel that way); Landlock's signal scope and ptrace rule
    then keep the solution away from other processes. `cgroup`: the worker's own group (orchestrator/cgroup.py),
    or why there is none."""
    cache = worker_cache(role, scratch)
    for name in ("triton", "inductor", "cuda", "cute_dsl", "xdg", "tmp"):
        os.makedirs(os.path.join(cache, name), mode=0o700, exist_ok=True)
    # Inductor keeps its precompiled headers below the temporary folder whatever its cache variable says.
    env.update(TMPDIR=os.path.join(cache, "tmp"), TRITON_CACHE_DIR=os.path.join(cache, "triton"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"), CUDA_CACHE_PATH=os.path.join(cache, "cuda"),
               XDG_CACHE_HOME=os.path.join(cache, "xdg"), CUTE_DSL_CACHE_DIR=os.path.join(cache, "cute_dsl"))
    env.pop("SOLBENCH_CACHE", None)  # compiled solutions build below XDG_CACHE_HOME (languages.cuda_cpp.cache_root)
    if os.environ.get("SOLBENCH_SANDBOX") == SANDBOX_OFF:
        env.pop("SOLBENCH_SANDBOX", None)
        return
    env["SOLBENCH_SANDBOX"] = json.dumps({"parent": os.getpid(), "writable": [scratch, cache], "namespaces": namespaces,
                                       "cgroup": cgroup})


class WorkerDied(RuntimeError):
    """The worker exited (crash, os._exit, signal) before replying; `code` is its exit status, if known."""

    def __init__(self, text: str, code: int | None = None):
        super().__init__(text)
        self.code = code


class WorkerTimeout(RuntimeError):
    """The worker did not reply in time; it has been killed."""


class WorkerProtocolError(RuntimeError):
    """The worker sent something the harness code never writes (forged or out of sequence); it is killed."""


class WorkerProcess:
    """One worker subprocess: start, request with a timeout, kill."""

    def __init__(self, device: str, *, extra_env: dict[str, str] | None = None, role: str = "solution"):
        self.device = device
        self.role = role
        self.extra_env = dict(extra_env or {})
        self.proc: subprocess.Popen | None = None
        self.conn: Connection | None = None
        self.output = OutputTail()
        self.scratch: tempfile.TemporaryDirectory | None = None
        self.cgroup: str | None = None  # its own cgroup v2 group, where the machine lets us make one
        self._reader: threading.Thread | None = None
        self._request_id = 0
        self.alarm_sock: socket.socket | None = None
        self._alarm_backlog: list[str] = []
        self._alarm_closed = False
        self.requests = 0
        self.core_claim: cpu_cores.CoreClaim | None = None  # the pair's CPU cores, held by its reference worker
        self.read_roots: list[str] | None = None  # the data roots its read rules allow (worker/reads.py)
        # kill() runs from the device's thread (closing its session) and from the thread that stops a run
        # (Ctrl-C): one at a time, or the second finds the channel half closed
        self._kill_lock = threading.RLock()

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self.running_pid is not None

    @property
    def running_pid(self) -> int | None:
        """The process id while the worker runs, else None. `proc` is read once: a kill in another thread (a
        cancel, a service's health read beside a crash) sets it to None at any moment."""
        proc = self.proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def start(self) -> None:
        self.scratch = tempfile.TemporaryDirectory(prefix=f"{self.role}_", dir=run_folder())
        parent_sock, child_sock = socket.socketpair()
        # A second channel that only the worker's audit hook writes: alarms arrive even when the reply
        # path has been subverted, and closing it is visible here (see solbench.worker.guard).
        alarm_parent, alarm_child = socket.socketpair()
        alarm_parent.setblocking(False)
        env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
        env.pop(cpu_cores.CORES_ENV, None)  # only what this worker's pair claimed (worker_pair)
        env.update(self.extra_env)
        env["SOLBENCH_CHANNEL_FD"] = str(child_sock.fileno())
        env["SOLBENCH_ALARM_FD"] = str(alarm_child.fileno())
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # any .pyc written by a worker is then the solution's doing
        # torch.compile compiles in this process, not in a pool of helper processes that outlive the
        # call (a solution's leftover children are treated as hidden work).
        env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
        self.cgroup, why = cgroup.make(self.role) if os.environ.get("SOLBENCH_SANDBOX") != SANDBOX_OFF else (None, "")
        sandbox_env(env, self.scratch.name, self.role, namespaces=not self.device.startswith("cuda"),
                    cgroup=self.cgroup or f"denied: {why}")
        # Make the solbench that runs this orchestrator importable in the worker without
        # putting the worker's cwd or any solution folder ahead of the standard library.
        package_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join([package_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        if self.device.startswith("cuda"):
            index = self.device.split(":")[1] if ":" in self.device else "0"
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            if visible:
                ids = [v.strip() for v in visible.split(",") if v.strip()]
                index = ids[int(index)] if int(index) < len(ids) else index
            env["CUDA_VISIBLE_DEVICES"] = index
            env["SOLBENCH_WORKER_DEVICE"] = "cuda:0"
        else:
            env["SOLBENCH_WORKER_DEVICE"] = "cpu"
            # docs/timing.md, "CPU timings": one intra-op thread; freed memory kept for the next call (glibc
            # otherwise maps and unmaps large blocks: a page fault per 4 KiB touched, 2-3x a call's CPU time)
            env["OMP_NUM_THREADS"] = env.get("SOLBENCH_CPU_THREADS", "1")
            env["MALLOC_MMAP_THRESHOLD_"] = env["MALLOC_TRIM_THRESHOLD_"] = str(1 << 30)
            env["TRITON_INTERPRET"] = "1"  # Triton kernels run in the interpreter on CPU
            env["CUDA_VISIBLE_DEVICES"] = ""
        if zygote.wanted(self.device):  # forked from a pre-imported template (orchestrator/zygote.py)
            self.proc = zygote.launch(env, self.scratch.name, child_sock, alarm_child, run_folder())
        else:
            self.proc = subprocess.Popen(
                zygote.WORKER_COMMAND,
                cwd=self.scratch.name, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, pass_fds=(child_sock.fileno(), alarm_child.fileno()), start_new_session=True,
            )
        child_sock.close()
        alarm_child.close()
        self.alarm_sock = alarm_parent
        self._alarm_backlog = []
        self._alarm_closed = False
        self.conn = Connection(parent_sock.detach())
        self.output = OutputTail()
        self.requests = 0  # a worker that has served nothing has seen no solution code
        self.read_roots = None
        self._reader = threading.Thread(target=self._drain, args=(self.proc.stdout, self.output), daemon=True)
        self._reader.start()

    @staticmethod
    def readable_roots(problem, data_roots: list) -> list[str]:
        """What a worker reads of the problem's data roots: all of them when a workload takes safetensors
        blobs, else none (the definition and workloads travel by content; worker/reads.py)."""
        blobs = any(src.kind == "safetensors" for w in problem.workloads for src in w.inputs.values())
        return [str(p) for p in data_roots] if blobs else []

    def may_read(self, roots: list[str]) -> bool:
        """Whether this process's read rules (fixed at its first load) cover `roots`."""
        return self.read_roots is None or set(roots) <= set(self.read_roots)

    def granted(self, roots: list[str]) -> list[str]:
        """`roots`, recorded as this process's read rules when it has none yet (its first load)."""
        self.read_roots = list(roots) if self.read_roots is None else self.read_roots
        return roots

    def adopt(self, other: WorkerProcess) -> None:
        """Take over `other`'s started process, channel and output (a pre-spawned spare); `other` is left empty."""
        self.__dict__.update(other.__dict__)
        other.__dict__.update(WorkerProcess(other.device, role=other.role).__dict__)

    @staticmethod
    def _drain(stream, tail: OutputTail) -> None:
        while True:
            chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
            if not chunk:
                return
            tail.feed(chunk)

    def request(self, request: msg.Request, timeout_s: float) -> msg.Reply:
        """Send one request and wait for its reply; kill the worker on timeout, death or a reply the
        harness never writes (`WorkerProtocolError`)."""
        from solbench.protocol import framing  # inner: torch, kept off `start` (cluster_actor)

        if self.proc is not None and not self.alive:
            # Never a silent restart: a worker that died since its last reply (killed, crashed) is a failure
            # of this request; only a load (session.load) starts a fresh process, with the code it names.
            code = self._reap()
            raise WorkerDied(f"worker exited after its last reply ({describe_exit(code)})", code)
        if not self.alive:
            self.start()
        # Local names: another thread (Ctrl-C's clean-up) may kill this worker and clear them meanwhile.
        conn, proc = self.conn, self.proc
        assert conn is not None and proc is not None
        self.requests += 1
        self._request_id += 1
        request_id = self._request_id
        try:
            framing.send(conn, codec.encode(request, request_id))
        except (BrokenPipeError, ConnectionResetError, OSError):
            code = self._reap()
            raise WorkerDied(f"worker exited before the request ({describe_exit(code)})", code) from None
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise WorkerTimeout(f"no reply within {timeout_s:.0f} s")
            try:
                if conn.poll(min(remaining, 0.5)):
                    return self._receive(conn, request, request_id, deadline)
            except (EOFError, ConnectionResetError, OSError):
                code = self._reap()
                raise WorkerDied(f"worker exited ({describe_exit(code)})", code) from None
            if proc.poll() is not None:
                # Replies already in the socket are still readable after the process ended.
                try:
                    if conn.poll(0):
                        return self._receive(conn, request, request_id, deadline)
                except (EOFError, OSError):
                    pass
                code = self._reap()
                raise WorkerDied(f"worker exited ({describe_exit(code)})", code)

    def _receive(self, conn, request: msg.Request, request_id: int, deadline: float) -> msg.Reply:
        """One reply, decoded without running code; it must answer `request_id`, arrive whole before
        `deadline` and be a well-formed reply to `request`."""
        from solbench.protocol import framing  # inner: torch, as in `request`

        try:
            data = framing.recv(conn, deadline)
        except framing.WireError as exc:  # the harness never writes a malformed message
            self.kill()
            raise WorkerProtocolError(f"malformed reply: {exc}") from None
        except framing.WireTimeout:
            self.kill()
            raise WorkerTimeout("the reply did not arrive whole in time") from None
        if type(data) is dict and data.get("id") != request_id:
            self.kill()
            raise WorkerProtocolError(f"a reply to request {data.get('id')!r} arrived while request {request_id} "
                                      f"was open (a second writer on the channel)")
        try:
            return codec.decode_reply(request, data, request_id)
        except codec.ProtocolError as exc:
            self.kill()
            raise WorkerProtocolError(f"malformed reply: {exc}") from None

    def read_alarms(self) -> tuple[list[str], bool]:
        """(alarm lines received so far and not yet read, whether the worker closed the alarm channel)."""
        if self.alarm_sock is not None and not self._alarm_closed:
            data = b""
            while True:
                try:
                    chunk = self.alarm_sock.recv(65536)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    self._alarm_closed = True
                    break
                if not chunk:
                    self._alarm_closed = True
                    break
                data += chunk
            lines = data.decode("utf-8", "replace").splitlines()
            # The hook never writes an empty line: blank data is someone else filling the channel.
            self._alarm_backlog += [line if line.strip() else "blank data written to the alarm channel (jammed)"
                                    for line in lines]
        lines, self._alarm_backlog = self._alarm_backlog, []
        return lines, self._alarm_closed

    def _reap(self) -> int | None:
        """The exit status of a worker whose channel closed (it may take a moment to exit)."""
        code = None
        if self.proc is not None:
            try:
                code = self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
        self.kill()
        return code

    def kill(self) -> None:
        """Kill the worker and everything it started (its process group and any descendants)."""
        with self._kill_lock:
            self._kill()

    def _kill(self) -> None:
        pid = self.proc.pid if self.proc is not None else None  # None: a forked worker that never started
        if self.proc is not None and pid is not None:
            kill_tree(pid)
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=10)
                getattr(self.proc, "release", lambda: None)()  # a forked worker's pid is free from here on
            except subprocess.TimeoutExpired:
                pass
            if self._reader is not None:
                self._reader.join(timeout=2)
        # Everything the worker started, whatever its parentage (a daemon re-parented away from the tree too);
        # after the wait, since a worker not yet reaped keeps the group from being removed.
        cgroup.kill(self.cgroup)
        self.cgroup = None
        if self.conn is not None:
            self.conn.close()
        self.conn = None
        if self.alarm_sock is not None:
            backlog, _ = self.read_alarms()  # keep what arrived before the end for the caller
            self._alarm_backlog = backlog
            self.alarm_sock.close()
            self.alarm_sock = None
        self.proc = None
        if self.scratch is not None:
            self.scratch.cleanup()
            self.scratch = None

    def stop(self, timeout_s: float = 10) -> None:
        """Ask politely, then kill. Only where the channel's module (and torch) is imported already: importing
        torch again after Ctrl-C cut its first import short crashed the process (SIGSEGV)."""
        if self.alive and "solbench.protocol.framing" in sys.modules:
            try:
                self.request(msg.Shutdown(), timeout_s)
            except Exception:  # noqa: BLE001 - no polite answer (died, killed meanwhile, an import cut short): killed
                pass
        self.kill()


def running_pid(worker: WorkerProcess | None) -> int | None:
    """`worker.running_pid`, None for no worker (a session's spare, say)."""
    return worker.running_pid if worker is not None else None


def describe_exit(code: int | None) -> str:
    if code == msg.ALARM_LOST_EXIT:
        return "ended by its audit hook: an alarm could not be delivered (the alarm channel was jammed or closed)"
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
