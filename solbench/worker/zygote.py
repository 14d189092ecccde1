"""The worker template ("zygote"): a process that has imported torch and the harness once, and forks a
fresh worker for each request of its orchestrator (orchestrator/zygote.py says why and when).

It never runs solution code, never loads a problem and never sees a worker's environment: a fork request
carries only the worker's three file descriptors (SCM_RIGHTS). The forked child reads its environment and
folder from its own channel, puts itself in the state a spawned worker starts in (`become_worker`: own
session, parent-death signal, descriptors, environment, signal dispositions), and returns to
`python -m solbench.worker`, which then enters the sandbox and serves, as a spawned worker does.

The template keeps no thread pool, CUDA context or CUDA driver: it checks before serving and before each
fork, and refuses (the orchestrator then spawns) where that does not hold.
"""

from __future__ import annotations

import ctypes
import fcntl
import gc
import json
import os
import select
import signal
import socket
import sys
import tempfile
import threading

CONTROL_ENV = "SOLBENCH_ZYGOTE_FD"  # the template's end of its control socket (SOCK_SEQPACKET)
PARENT_ENV = "SOLBENCH_ZYGOTE_PARENT"  # the orchestrator's pid: the template dies with it
CHANNEL_FD, ALARM_FD = 3, 4  # where a forked worker keeps its channel and alarm socket
PARENT_POLL_S = 0.5
PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4
CUDA_ERROR_NOT_INITIALIZED = 3
_libc = ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, arg: int) -> None:
    if _libc.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def _cuda_driver_initialised() -> bool:
    """Whether cuInit ran in this process. Loading libcuda is harmless to a fork (an import such as CUPTI's
    maps it on a GPU machine); its initialisation is not. A driver query that needs cuInit answers
    CUDA_ERROR_NOT_INITIALIZED before it, and initialises nothing. A libcuda we cannot reach counts as
    initialised."""
    try:
        driver = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return True
    count = ctypes.c_int(0)
    return driver.cuDeviceGetCount(ctypes.byref(count)) != CUDA_ERROR_NOT_INITIALIZED


def fork_hazards() -> list[str]:
    """What would make a fork of this process unlike a fresh worker: a CUDA driver initialised (a CUDA
    context, or cuInit, does not survive fork), a Python thread besides this one (its locks are copied held)."""
    found = []
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        found.append("CUDA initialised")
    with open("/proc/self/maps") as maps:
        loaded = any("libcuda.so" in line for line in maps)
    if loaded and _cuda_driver_initialised():
        found.append("the CUDA driver (libcuda) is initialised")
    if threading.active_count() != 1:
        found.append(f"{threading.active_count()} Python threads")
    return found


def serve() -> int:
    """The template's loop. Returns only in a forked child, once it is in a spawned worker's starting
    state: the template's pid (its parent, whose end is its end); the template itself ends with its
    orchestrator."""
    control = socket.socket(fileno=int(os.environ.pop(CONTROL_ENV)))
    parent = int(os.environ.pop(PARENT_ENV))
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(70)
    # Not dumpable: no process of this user may ptrace it or open its /proc files (a forked worker is made
    # dumpable again, as a spawned one is).
    _prctl(PR_SET_DUMPABLE, 0)
    import solbench.worker.main  # noqa: F401 - the point of the template: torch and the harness, imported once

    gc.collect()
    gc.freeze()  # the imported harness out of the collector's reach: fewer pages copied in each child
    hazards = fork_hazards()
    _send(control, {"ready": os.getpid(), "hazards": hazards, "threads": len(os.listdir("/proc/self/task"))})
    if hazards:
        os._exit(0)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the select below through the wakeup pipe
    children: dict[int, bool] = {}  # forked pid -> whether its exit was reported
    while True:
        if os.getppid() != parent:
            os._exit(0)
        try:
            ready, _, _ = select.select([control, wake_r], [], [], PARENT_POLL_S)
        except InterruptedError:
            continue
        if wake_r in ready:
            _drain(wake_r)
        _report_exits(control, children)
        if control not in ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(control, 4096, 4)
        except OSError:
            os._exit(0)
        if not data:  # the orchestrator closed the control socket
            os._exit(0)
        request = json.loads(data)
        if "reap" in request:
            _reap(int(request["reap"]), children)
            continue
        forked = _fork(control, request, fds, children)
        if forked is not None:
            return become_worker(forked, control)


def _fork(control: socket.socket, request: dict, fds: list[int], children: dict[int, bool]):
    """Fork one worker for `request` (its token and its four descriptors: channel, alarm, output, setup).
    Returns the descriptors in the child, None in the template."""
    token = request.get("fork")
    hazards = fork_hazards()
    if len(fds) != 4 or hazards:
        for fd in fds:
            os.close(fd)
        _send(control, {"failed": token, "why": "; ".join(hazards) or f"{len(fds)} descriptors, not 4"})
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        return fds
    for fd in fds:
        os.close(fd)
    children[pid] = False
    _send(control, {"forked": token, "pid": pid})
    return None


def _report_exits(control: socket.socket, children: dict[int, bool]) -> None:
    """Say which children ended, and how; they stay zombies (their pid reserved) until the orchestrator
    asks for their reaping, as a `subprocess.Popen` child stays its parent's until waited for."""
    for pid, reported in list(children.items()):
        if reported:
            continue
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            info = None
            children.pop(pid)
        if info is None:
            continue
        code = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
        children[pid] = True
        _send(control, {"exited": pid, "code": code})


def _reap(pid: int, children: dict[int, bool]) -> None:
    if children.pop(pid, None) is None:
        return
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except (BlockingIOError, InterruptedError):
        pass


def _send(control: socket.socket, message: dict) -> None:
    try:
        control.send(json.dumps(message).encode())
    except OSError:  # the orchestrator is gone
        os._exit(0)


def become_worker(fds: list[int], control: socket.socket) -> int:
    """In the forked child: the state `subprocess.Popen(..., start_new_session=True, pass_fds=...)` gives a
    spawned worker, then its environment and folder from its own channel. Nothing of the template's
    control, signal handling or descriptors stays; an error ends the child (the orchestrator sees it die)."""
    template = os.getppid()
    try:
        os.setsid()
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the template, which dies with the orchestrator
        if os.getppid() != template:
            os._exit(70)
        _prctl(PR_SET_DUMPABLE, 1)
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        control.detach()  # closed below with the rest: no socket object left to close a reused number
        channel, alarm, output, setup_fd = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in fds)  # clear of 0-4
        null = fcntl.fcntl(os.open(os.devnull, os.O_RDONLY), fcntl.F_DUPFD, 10)
        for source, target in ((null, 0), (output, 1), (output, 2), (channel, CHANNEL_FD), (alarm, ALARM_FD)):
            os.dup2(source, target)
        setup = json.loads(_read_all(setup_fd))
        os.closerange(ALARM_FD + 1, os.sysconf("SC_OPEN_MAX"))  # every other descriptor: the template's included
        os.chdir(setup["cwd"])
        os.environ.clear()
        os.environ.update(setup["env"])
        os.environ.update(SOLBENCH_CHANNEL_FD=str(CHANNEL_FD), SOLBENCH_ALARM_FD=str(ALARM_FD))
        _fresh_process_state()
    except BaseException as exc:  # noqa: BLE001 - said on the worker's output, then the child ends
        os.write(2, f"solbench: a forked worker could not start: {exc!r}\n".encode())
        os._exit(71)
    return template


def _read_all(fd: int) -> bytes:
    """The worker's environment and folder, written by the orchestrator into its own socket, which it
    closes after writing (orchestrator/zygote.py)."""
    data = b""
    while chunk := os.read(fd, 1 << 16):
        data += chunk
    return data


def _fresh_process_state() -> None:
    """What a new interpreter would not share with its siblings: Python's `random` reseeds itself at fork;
    numpy's global generator (seeded from the OS at import) does not; the temporary folder is read again
    from TMPDIR."""
    tempfile.tempdir = None
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()
