"""The worker at the operating-system boundary: what the kernel enforces whatever the solution does.

Applied first thing in every worker process (`python -m solbench.worker`), before torch or any solution
code is imported, as far as this machine's kernel allows:

* it dies with its orchestrator (`PR_SET_PDEATHSIG`), and orphans of its descendants (a double fork,
  `setsid`) are re-parented to it (`PR_SET_CHILD_SUBREAPER`), where the child-process watch sees them
  and the orchestrator's kill reaches them;
* in a new PID namespace (with a user namespace where the user is not root; not on a GPU, where
  legacy CUDA IPC handles cannot cross PID namespaces, see orchestrator/process.py) the worker is the
  namespace's first process: everything it starts dies with it, and no process outside (the
  orchestrator, the reference worker) can be named, so none can be signalled, traced or read; a new
  mount namespace gets its own `/proc`, which shows only the namespace;
* it moves into its own cgroup v2 group where the orchestrator could make one (orchestrator/cgroup.py):
  `cgroup.kill` then ends everything it started, whatever its parentage;
* `PR_SET_NO_NEW_PRIVS`, then Landlock: writes only below the worker's private folders (its scratch
  folder, the run's compiler caches) and to the GPU runtime's device files (`device_files`); reading
  is limited at the worker's first load (worker/reads.py); no ptrace, and (ABI 6) no signal, to processes outside the worker's own domain;
* every capability dropped (worker/capabilities.py): a worker started as root keeps none of root's powers;
* seccomp: no `ptrace`, `process_vm_readv/writev` or `pidfd_getfd`, no `clone(CLONE_PARENT)` (a sibling
  outside the worker's tree), `clone3` made unavailable (its flags are out of a filter's reach).

`contained_by` in `APPLIED` says which mechanism keeps what the worker starts from outliving it.

The orchestrator passes what to apply in `SOLBENCH_SANDBOX` (`enter_from_env`); what was applied is
`APPLIED`, recorded in every trace's environment (`sandbox`). A mechanism the machine denies is said
so there, and the in-process checks (worker/guard.py) remain. `python -m solbench.worker.sandbox`
prints what this machine allows.
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import platform
import signal
import sys

from solbench.worker import capabilities

ENV_VAR = "SOLBENCH_SANDBOX"
PR_SET_PDEATHSIG, PR_SET_SECCOMP, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 22, 36, 38
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x20000, 0x10000000, 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18
LANDLOCK_CREATE_RULESET, LANDLOCK_ADD_RULE, LANDLOCK_RESTRICT_SELF = 444, 445, 446  # same on every arch
LANDLOCK_CREATE_RULESET_VERSION, LANDLOCK_RULE_PATH_BENEATH = 1, 1
# Landlock's filesystem rights that change something: each handled right is denied outside the rules.
WRITE_FILE, MAKE_ALL, REMOVE_ALL = 1 << 1, sum(1 << b for b in range(6, 13)), (1 << 4) | (1 << 5)
REFER, TRUNCATE = 1 << 13, 1 << 14  # ABI 2 and 3
SCOPE_SIGNAL = 1 << 1  # ABI 6: no signal to a process outside the domain (the orchestrator, the other worker)
# seccomp: (audit arch, syscall numbers refused with EPERM) per machine.
SECCOMP_DENY = {"x86_64": (0xC000003E, {"ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
                                         "pidfd_getfd": 438}),
                "aarch64": (0xC00000B7, {"ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
                                          "pidfd_getfd": 438})}
CLONE_NR, CLONE3_NR, CLONE_PARENT, X32_SYSCALL_BIT = {"x86_64": 56, "aarch64": 220}, 435, 0x8000, 0x40000000
APPLIED: dict[str, object] = {}  # mechanism -> True, or why not (a string); read by worker/environment.py
WRITABLE: list[str] = []  # the worker's private folders (enter); worker/reads.py lets it read them too

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def _prctl(option: int, arg: int = 0, arg3=0) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(arg), arg3, ctypes.c_ulong(0), ctypes.c_ulong(0)), "prctl")


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL when the parent ends; if it already has (the race before prctl), end now."""
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        os._exit(70)


def enter_namespaces() -> str:
    """A new PID and mount namespace for this process's children (a user namespace too where the user
    is not root). Returns which were made; raises OSError when the kernel refuses. The user namespace
    and its id maps come first: a PID namespace entered without its fork after it would leave this
    process unable to start threads."""
    uid, gid = os.getuid(), os.getgid()
    if uid != 0:  # the same ids inside: files keep their owners, nothing gains a privilege outside
        _check(_libc.unshare(CLONE_NEWUSER), "unshare")
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
        with open("/proc/self/uid_map", "w") as f:
            f.write(f"{uid} {uid} 1")
        with open("/proc/self/gid_map", "w") as f:
            f.write(f"{gid} {gid} 1")
    _check(_libc.unshare(CLONE_NEWPID | CLONE_NEWNS), "unshare")
    return "user+pid+mount" if uid != 0 else "pid+mount"


def supervise(child: int) -> None:
    """The process outside the namespace: wait for the worker, end as it ended (never returns)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame, _child=child: os.kill(_child, signal.SIGKILL))
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(1)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if not os.WIFSIGNALED(status) else 1)


def mount_private_proc() -> None:
    """This namespace's own /proc: the processes outside (and their memory files) are out of sight."""
    _check(_libc.mount(None, b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None), "mount --make-rprivate /")
    _check(_libc.mount(b"proc", b"/proc", b"proc", ctypes.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC), None),
           "mount proc")


def landlock_abi() -> int:
    """Landlock's ABI version (0: not available)."""
    try:
        version = _libc.syscall(LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                                ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))
    except (AttributeError, OSError):
        return 0
    return max(0, int(version))


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def device_files() -> list[str]:
    """The device files a worker may write, and nothing else in /dev (a block device, /dev/mem, a tty):
    the GPU runtime's `nvidia*` nodes (nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset, one per
    GPU, and the nvidia-caps folder of MIG capabilities, which the driver opens for writing), /dev/null
    and /dev/zero (what tools redirect to and map), /dev/urandom (seeds). /dev/shm is a writable folder."""
    return sorted(glob.glob("/dev/nvidia*")) + ["/dev/null", "/dev/zero", "/dev/urandom"]


def restrict_writes(writable: list[str], device_paths: list[str]) -> int:
    """Landlock: every write-like right only below `writable`; writing existing files that are, or are
    below, `device_paths` (device_files(), the worker's own /proc entry). Needs no_new_privs set.
    Returns the ABI used."""
    abi = landlock_abi()
    if abi < 1:
        raise OSError("Landlock is not available in this kernel")
    handled = WRITE_FILE | MAKE_ALL | REMOVE_ALL | (REFER if abi >= 2 else 0) | (TRUNCATE if abi >= 3 else 0)
    # struct landlock_ruleset_attr {handled_access_fs, handled_access_net, scoped}: the kernel reads what it knows.
    attr = (ctypes.c_uint64 * 3)(handled, 0, SCOPE_SIGNAL if abi >= 6 else 0)
    size = 24 if abi >= 6 else 8
    ruleset = _check(_libc.syscall(LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size),
                                   ctypes.c_uint32(0)), "landlock_create_ruleset")
    try:
        rules = [(p, handled) for p in writable if os.path.isdir(p)]
        rules += [(p, WRITE_FILE | (TRUNCATE if abi >= 3 else 0)) for p in device_paths if os.path.exists(p)]
        for path, access in rules:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneath(access, fd)
                _check(_libc.syscall(LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(rule),
                                     ctypes.c_uint32(0)), f"landlock_add_rule {path}")
            finally:
                os.close(fd)
        _check(_libc.syscall(LANDLOCK_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return abi


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_SockFilter))]


def seccomp_program(arch: int, denied: list[int], clone_nr: int | None = None,
                    clone3_nr: int | None = None) -> list[tuple[int, int, int, int]]:
    """A classic-BPF seccomp program: a syscall of another arch (i386's `int 0x80`, x32) or one of `denied`
    fails with EPERM; `clone` with CLONE_PARENT (a sibling of the worker, outside its tree) fails with
    EPERM; `clone3` fails with ENOSYS, so the C library falls back to `clone`, whose flags a filter can
    read (clone3's are behind a pointer). All else runs."""
    ld_w_abs, jeq_k, jge_k, jset_k, ret_k = 0x20, 0x15, 0x35, 0x45, 0x06
    returns = {"allow": 0x7FFF0000, "eperm": 0x00050000 | 1, "enosys": 0x00050000 | 38}
    # (code, jump-if-true label, jump-if-false label, k); a label is a return's name, or None: the next one
    body: list[tuple[int, str | None, str | None, int]] = [(ld_w_abs, None, None, 4), (jeq_k, None, "eperm", arch),
                                                          (ld_w_abs, None, None, 0)]
    if arch == SECCOMP_DENY["x86_64"][0]:
        body.append((jge_k, "eperm", None, X32_SYSCALL_BIT))
    body += [(jeq_k, "eperm", None, nr) for nr in denied]
    if clone3_nr is not None:
        body.append((jeq_k, "enosys", None, clone3_nr))
    if clone_nr is not None:
        body += [(jeq_k, None, "allow", clone_nr), (ld_w_abs, None, None, 16),  # the low half of args[0]: flags
                 (jset_k, "eperm", None, CLONE_PARENT)]
    at = {name: len(body) + i for i, name in enumerate(returns)}

    def offset(label: str | None, i: int) -> int:
        return 0 if label is None else at[label] - i - 1

    prog = [(code, offset(jt, i), offset(jf, i), k) for i, (code, jt, jf, k) in enumerate(body)]
    return prog + [(ret_k, 0, 0, value) for value in returns.values()]


def install_seccomp() -> list[str]:
    """Refuse ptrace, cross-process memory access and CLONE_PARENT from here on (needs no_new_privs)."""
    machine = platform.machine()
    if machine not in SECCOMP_DENY:
        raise OSError(f"no seccomp table for {machine}")
    arch, table = SECCOMP_DENY[machine]
    prog = seccomp_program(arch, list(table.values()), CLONE_NR[machine], CLONE3_NR)
    filters = (_SockFilter * len(prog))(*[_SockFilter(*ins) for ins in prog])
    fprog = _SockFprog(len(prog), ctypes.cast(filters, ctypes.POINTER(_SockFilter)))
    _check(_libc.prctl(PR_SET_SECCOMP, ctypes.c_ulong(2), ctypes.byref(fprog), ctypes.c_ulong(0),
                       ctypes.c_ulong(0)), "seccomp")
    return [*sorted(table), "clone(CLONE_PARENT)", "clone3 (ENOSYS)"]


def _step(name: str, action) -> None:
    try:
        result = action()
        APPLIED[name] = True if result is None else result
    except OSError as exc:
        APPLIED[name] = f"denied: {exc.strerror or exc}"


def join_cgroup(path: str) -> str:
    """Move into the worker's own cgroup (orchestrator/cgroup.py), before starting anything."""
    with open(os.path.join(path, "cgroup.procs"), "w") as f:
        f.write("0")
    return "own group, killed with cgroup.kill at the worker's end"  # no per-run name: traces compare


def containment() -> str:
    """Which mechanism keeps every process the worker starts from outliving it (the trace says)."""
    if str(APPLIED.get("namespaces", "")).startswith(("pid", "user+pid")):
        return "pid namespace: everything in it dies with the worker"
    if str(APPLIED.get("cgroup", "")).startswith("own group"):
        return "cgroup: cgroup.kill ends the whole group"
    if str(APPLIED.get("seccomp", "")).startswith("refused") and APPLIED.get("subreaper") is True:
        return ("seccomp and subreaper: no CLONE_PARENT, no clone3, orphans re-parented to the worker, "
                "whose tree the orchestrator stops and kills")
    return "none beyond the orchestrator's kill of the worker's process tree"


def enter(parent_pid: int, writable: list[str], namespaces: bool = True, cgroup: str = "") -> None:
    """Apply every mechanism this machine allows; may fork (a supervisor stays outside the namespace),
    and returns only in the process that goes on as the worker. `cgroup`: the worker's own group, or
    "denied: why" where the orchestrator could not make one."""
    WRITABLE[:] = writable
    _step("pdeathsig", lambda: die_with_parent(parent_pid))
    if cgroup.startswith("/"):
        _step("cgroup", lambda: join_cgroup(cgroup))
    else:
        APPLIED["cgroup"] = cgroup or "off: not asked for"
    made = None
    APPLIED["namespaces"] = "off: not asked for"
    if namespaces:
        try:
            made = enter_namespaces()
        except OSError as exc:
            APPLIED["namespaces"] = f"denied: {exc.strerror or exc}"
    if made:
        child = os.fork()
        if child:
            supervise(child)
        APPLIED["namespaces"] = made
        # The supervisor's end is the worker's; its pid outside the namespace reads as 0 from inside.
        _step("pdeathsig", lambda: die_with_parent(0))
        _step("private_proc", mount_private_proc)
    _step("subreaper", lambda: _prctl(PR_SET_CHILD_SUBREAPER, 1))
    _step("no_new_privs", lambda: _prctl(PR_SET_NO_NEW_PRIVS, 1))
    # /dev/shm: POSIX shared memory (torch's share_memory_, multiprocessing) lives there, a tmpfs.
    # Landlock also keeps ptrace and /proc/<pid>/mem from reaching outside the domain, and from ABI 6 signals.
    # The worker's own /proc entry: the CUDA driver writes there (thread names, settings) and fails to
    # initialise without it (error 304 on the H100); other processes' entries stay out of reach.
    _step("landlock", lambda: restrict_writes([*writable, "/dev/shm"], [*device_files(), f"/proc/{os.getpid()}"])
          and f"writes only below {len(writable)} private folders, /dev/shm and the GPU's device files"
              f"{'; signals only inside' if landlock_abi() >= 6 else ''} (ABI {landlock_abi()})")
    _step("capabilities", capabilities.drop_all)  # after the mount and the cgroup move, which needed them
    _step("seccomp", lambda: "refused: " + ", ".join(install_seccomp()))
    APPLIED["contained_by"] = containment()


def enter_from_env(parent_pid: int | None = None) -> None:
    """What the orchestrator asked for (`SOLBENCH_SANDBOX`, JSON), applied; nothing when unset. `parent_pid`:
    a forked worker's parent, the template (worker/zygote.py), which dies with the orchestrator."""
    raw = os.environ.pop(ENV_VAR, None)
    if not raw:
        APPLIED["off"] = "not asked for"
        return
    spec = json.loads(raw)
    enter(parent_pid or int(spec["parent"]), [str(p) for p in spec.get("writable", [])],
          bool(spec.get("namespaces", True)), str(spec.get("cgroup", "")))


def allowed_here() -> dict[str, object]:
    """What this machine allows, tried in a throw-away child process."""
    from solbench.orchestrator import cgroup  # the orchestrator's side, only for this probe of the machine

    group, why = cgroup.make("probe")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            scratch = os.environ.get("TMPDIR", "/tmp")
            enter(os.getppid(), [scratch], True, group or f"denied: {why}")
            payload = json.dumps(APPLIED).encode()
        except BaseException as exc:  # noqa: BLE001 - reported, never raised out of the child
            payload = json.dumps({"error": repr(exc)}).encode()
        os.write(write, payload)
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.close(read)
    os.waitpid(pid, 0)
    cgroup.kill(group)
    return json.loads(data or b"{}")


def main() -> None:
    report = {"kernel": platform.release(), "machine": platform.machine(), "uid": os.getuid(),
              "landlock_abi": landlock_abi(), **allowed_here()}
    print(json.dumps(report, indent=2))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
