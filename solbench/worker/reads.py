"""What a worker may read (issue 47): the runtime, its own folders and its problem's data; nothing else.

The write rules of worker/sandbox.py leave reading free; a solution could then read a service's folder
(other users' solutions, traces, problems sent by content), an orchestrator's trace file, or another
process's `/proc/<pid>/cmdline` and `environ` (a token on a command line). A second Landlock ruleset,
stacked on the first at the worker's first `load` (before the reference or the solution is imported),
handles the read rights (read a file, list a folder, execute) and allows them only below:

* the runtime, derived from this interpreter and the machine's own settings, never from a list of
  machine paths: `sys.prefix` and its base, `sysconfig`'s folders, every `sys.path` folder, the
  site-packages, the packages torch, triton and solbench load from, the operating system's program
  and library folders (`/usr`, `/lib*`, `/bin`, `/sbin`), `PATH` and `LD_LIBRARY_PATH`, `CUDA_HOME`,
  the install prefix of each compiler the machine names (`CC`, `CXX`, `nvcc`, `gcc`), Triton's
  tool paths, the loader's and name service's files in `/etc`, `/sys` (CUDA, NVML, CPU topology);
* the worker's own folders (scratch, compiler caches, temporary folder: `sandbox.WRITABLE`);
* the problem's data roots (where its safetensors blobs are), when a workload of it takes blobs: the
  definition, workload and solution travel by content on the worker's channel;
* the device files the GPU runtime opens (`sandbox.device_files`), `/dev/shm`, `/dev/random`;
* `/proc`: all of it where the worker has a private `/proc` (its PID namespace: it shows nothing
  else); elsewhere (GPU workers) every entry but the per-process folders, and the worker's own.
  Processes the worker starts there cannot open their own `/proc/<pid>` files (reading the link
  `/proc/self/exe` still works): a limit of rules fixed when the worker loads.

Rules are fixed per process: a worker restricted for one problem's data roots takes a later load only
if that load's roots are among them (`covers`); the orchestrator starts a fresh process otherwise.
What was applied is in `sandbox.APPLIED` (`reads`, `proc`), so in every trace's environment.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import site
import sys
import sysconfig

from solbench.worker import sandbox

EXECUTE, READ_FILE, READ_DIR = 1 << 0, 1 << 2, 1 << 3
READ_RIGHTS = EXECUTE | READ_FILE | READ_DIR
# The operating system's programs and shared libraries (the dynamic loader, libc, compilers, locales).
OS_ROOTS = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin")
# What the dynamic loader, the C library's name service and time zone code open in /etc; never the rest
# (/etc/shadow, /etc/ssl/private: root's files stay root's readable ones, capabilities dropped or not).
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ld.so.preload", "localtime", "timezone", "passwd",
             "group", "nsswitch.conf", "os-release", "hosts", "host.conf", "resolv.conf", "gai.conf", "protocols",
             "services", "mime.types", "alternatives", "OpenCL", "glvnd", "nvidia", "vulkan")
TRITON_TOOLS = ("TRITON_PTXAS_PATH", "TRITON_PTXAS_BLACKWELL_PATH", "TRITON_CUOBJDUMP_PATH", "TRITON_NVDISASM_PATH",
                "TRITON_LIBCUDA_PATH", "TRITON_CUDACRT_PATH", "TRITON_CUPTI_LIB_PATH")
COMPILERS = ("nvcc", "gcc", "cc", "c++", "g++", "clang")
GRANTED: list[list[str]] = []  # the data roots granted at the first load (empty: not restricted yet)


def _prefix_of(program: str) -> str | None:
    """The install prefix of a program found on this machine (`/opt/gcc` for `/opt/gcc/bin/gcc`): its
    compiler driver needs the prefix's lib, libexec and include folders."""
    found = shutil.which(program) if program else None
    if not found:
        return None
    folder = os.path.dirname(os.path.realpath(found))
    return os.path.dirname(folder) if os.path.basename(folder) == "bin" else folder


def runtime_roots(env: dict[str, str] | None = None) -> list[str]:
    """The runtime's folders and files, derived from this interpreter and the environment it started in."""
    env = dict(os.environ) if env is None else env
    roots = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable))]
    roots += [p for p in sysconfig.get_paths().values() if p]
    sites = site.getsitepackages() + [site.getusersitepackages()]
    # solbench's own folder on sys.path (a checkout: process.py puts it first) holds more than the package,
    # maybe the service's folder: only the package below it. Imports still work: the path's finder keeps
    # the listing it read before the rules, and a name it cannot list is looked up further down sys.path.
    harness_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    roots += [p for p in sys.path if p and os.path.isabs(p) and (p != harness_root or p in sites)]
    roots += sites
    for name in ("solbench", "torch", "triton"):  # found without importing (editable installs live elsewhere)
        spec = importlib.util.find_spec(name)
        roots += list(spec.submodule_search_locations or []) if spec is not None else []
    roots += list(OS_ROOTS) + [os.path.join("/etc", name) for name in ETC_FILES] + ["/sys"]
    for var in ("PATH", "LD_LIBRARY_PATH"):
        roots += [p for p in env.get(var, "").split(os.pathsep) if os.path.isabs(p)]
    roots += [env[v] for v in ("CUDA_HOME", "CUDA_PATH", "CUTLASS_DIR") if env.get(v)]
    roots += [p for p in (_prefix_of(c) for c in (env.get("CC", ""), env.get("CXX", ""), *COMPILERS)) if p]
    roots += [os.path.dirname(env[v]) for v in TRITON_TOOLS if env.get(v)]
    return roots


def too_broad(path: str) -> bool:
    """A folder that would let the worker read everything below it: the root, the temporary folder
    (other runs' scratch folders), a home folder itself (keys, state)."""
    home = os.path.realpath(os.path.expanduser("~"))
    return path in ("/", "/tmp", "/var/tmp", "/home", "/root", "/dev", "/proc", home)


def proc_roots(private: bool) -> list[str]:
    """What of /proc the worker reads: all of a private one (only its namespace's processes are in it);
    else every entry but the per-process folders (`/proc/self` resolves into one), and its own."""
    if private:
        return ["/proc"]
    entries = [os.path.join("/proc", name) for name in os.listdir("/proc")
               if not name.isdigit() and name not in ("self", "thread-self")]
    return entries + [f"/proc/{os.getpid()}"]


def allowed(data_roots: list[str], private_proc: bool, env: dict[str, str] | None = None) -> list[str]:
    """Every path the worker may read, real paths, existing, without duplicates or too-broad folders."""
    paths = runtime_roots(env) + list(sandbox.WRITABLE) + list(data_roots)
    paths += sandbox.device_files() + ["/dev/random", "/dev/shm"]
    out: list[str] = []
    for path in paths:
        real = os.path.realpath(path)
        if os.path.exists(real) and not too_broad(real) and real not in out:
            out.append(real)
    return out + proc_roots(private_proc)  # /proc's own paths: realpath would turn /proc/self's into a pid


def restrict_reads(paths: list[str]) -> int:
    """Landlock: read, list and execute only below `paths` (stacked on the write rules). Returns the ABI."""
    abi = sandbox.landlock_abi()
    if abi < 1:
        raise OSError("Landlock is not available in this kernel")
    sandbox._prctl(sandbox.PR_SET_NO_NEW_PRIVS, 1)
    libc, check = sandbox._libc, sandbox._check
    # Landlock denies linking or renaming across folders (EXDEV) in every layer that does not grant REFER,
    # handled or not: Triton and Inductor publish their caches by rename. This layer grants it wherever it
    # grants reads; the write layer still limits it to the writable folders.
    refer = sandbox.REFER if abi >= 2 else 0
    attr = (sandbox.ctypes.c_uint64 * 1)(READ_RIGHTS | refer)
    ruleset = check(libc.syscall(sandbox.LANDLOCK_CREATE_RULESET, sandbox.ctypes.byref(attr),
                                 sandbox.ctypes.c_size_t(8), sandbox.ctypes.c_uint32(0)), "landlock_create_ruleset")
    try:
        for path in paths:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # gone since it was listed (a /proc entry)
            try:
                access = READ_RIGHTS | refer if os.path.isdir(path) else EXECUTE | READ_FILE
                rule = sandbox._PathBeneath(access, fd)
                check(libc.syscall(sandbox.LANDLOCK_ADD_RULE, ruleset, sandbox.LANDLOCK_RULE_PATH_BENEATH,
                                   sandbox.ctypes.byref(rule), sandbox.ctypes.c_uint32(0)), f"landlock_add_rule {path}")
            finally:
                os.close(fd)
        check(libc.syscall(sandbox.LANDLOCK_RESTRICT_SELF, ruleset, sandbox.ctypes.c_uint32(0)),
              "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return abi


def private_proc() -> bool:
    """Whether this worker's /proc is its PID namespace's own (sandbox.enter mounted it)."""
    return (str(sandbox.APPLIED.get("namespaces", "")).startswith(("pid", "user+pid"))
            and sandbox.APPLIED.get("private_proc") is True)


def covers(data_roots: list[str]) -> bool:
    """Whether this process may read `data_roots` (not restricted yet, or granted at its first load)."""
    if not GRANTED:
        return True
    granted = [os.path.realpath(r) for r in GRANTED[0]]
    return all(any(os.path.realpath(r) == g or os.path.realpath(r).startswith(g + os.sep) for g in granted)
               for r in data_roots)


def restrict_for_load(data_roots: list[str]) -> str | None:
    """At a load, before the code it names runs: the read rules, once per process (sandbox.APPLIED says).
    Returns a warning for the trace where the kernel could not enforce them."""
    if GRANTED or not sandbox.APPLIED or "off" in sandbox.APPLIED:
        return None  # not a worker (enter_from_env never ran: a test calling the worker's code in process)
    GRANTED.append(list(data_roots))
    private = private_proc()
    try:
        abi = restrict_reads(allowed(data_roots, private))
        sandbox.APPLIED["reads"] = (f"landlock ABI {abi}: the runtime, the worker's own folders, "
                                    f"its problem's data roots")
        sandbox.APPLIED["proc"] = ("private /proc (pid namespace)" if private
                                   else "landlock: the worker's own /proc entry only, no other process's")
    except OSError as exc:
        why = exc.strerror or str(exc)
        sandbox.APPLIED["reads"] = f"NOT ENFORCED ({why}): the worker can read every file its user can"
        sandbox.APPLIED["proc"] = ("private /proc (pid namespace)" if private
                                   else f"NOT ENFORCED ({why}): other processes' /proc entries are readable")
        return f"sandbox: reads NOT ENFORCED ({why}): this worker could read every file its user can"
    return None


def enforced_here() -> str:
    """One line on what a worker here cannot read (`solbench serve`'s start-up line)."""
    if os.environ.get(sandbox.ENV_VAR) == "off":
        return "isolation OFF (SOLBENCH_SANDBOX=off): workers can read every file their user can"
    abi = sandbox.landlock_abi()
    if abi < 1:
        return ("isolation NOT ENFORCED (no Landlock in this kernel): workers can read the service's folder "
                "and other processes' /proc entries")
    return (f"isolation: Landlock ABI {abi} read rules (runtime, own folders, own problem's data), "
            f"/proc limited to the worker's own processes")
