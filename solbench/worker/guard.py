"""In-process guards of a worker that runs untrusted code: an integrity snapshot and an audit hook.

Both run inside the solution's own process, so neither is a wall: code there can, in principle, read
and rewrite anything. They exist to turn the cheap, general attacks into detected ones:

* `IntegritySnapshot`: what the harness modules (every `solbench.*` module loaded before the
  solution), the worker's handler table, and the torch / standard-library functions the harness
  calls held when the worker started, by identity (functions also by `__code__` and defaults), and
  the `sys.modules` entries of those modules. `check()` lists what changed. The snapshot lives in the
  default arguments of the checking function (a tuple; replacing a function's defaults or code is an
  audited event, see below), not in a module global a solution could rebind.
* `install_audit_hook`: a PEP 578 audit hook, installed before any solution code runs. Hooks cannot
  be removed, and they run before the audited operation completes. Events that reveal an attack
  (`gc.get_objects`/`get_referrers`/`get_referents`, `sys._current_frames`, replacing the code or
  defaults of a harness or torch.cuda function, writing harness-controlled environment variables,
  writing files under the problem folder or the harness package, starting a process while being
  timed) are written at once to an *alarm channel*: a socket only this process holds, which the
  orchestrator reads after every reply. Closing or replacing that socket is itself visible to the
  orchestrator (end of file while the worker lives). Events that are merely unusual (ctypes, tracing
  hooks, other environment writes, processes started outside timing) are collected as warnings
  that end up in the trace.

What this does not stop: code that avoids audited operations entirely (frame walking through
`f_back` is not audited) and rewrites the harness's objects, or native code (ctypes, a C extension)
that edits memory. Such code can forge timings; it still cannot make wrong outputs pass, because
outputs are judged in the orchestrator against a reference computed in another process. See
docs/anticheat.md.
"""

from __future__ import annotations

import builtins
import contextlib
import gc
import importlib.util
import io
import math
import os
import pickle
import random
import shutil
import site
import socket
import sys
import sysconfig
import threading
import time
import types
from collections.abc import Callable
from multiprocessing import connection

import torch

from solbench.protocol import messages as msg

# Variables the harness sets for the worker, or that change how the measurement behaves.
PROTECTED_ENV = frozenset({"CUDA_VISIBLE_DEVICES", "CUDA_LAUNCH_BLOCKING", "TRITON_INTERPRET", "LD_PRELOAD",
                           "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONUNBUFFERED", "CUDA_DEVICE_MAX_CONNECTIONS",
                           "PYTORCH_NO_CUDA_MEMORY_CACHING", "NVIDIA_TF32_OVERRIDE"})
PROTECTED_ENV_PREFIXES = ("SOLBENCH_",)

ALARM_EVENTS = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames"})
PROCESS_EVENTS = frozenset({"os.fork", "os.forkpty", "subprocess.Popen", "os.posix_spawn", "os.exec", "os.spawn",
                            "os.system", "pty.spawn"})
FILE_EVENTS = frozenset({"open", "os.rename", "os.remove", "os.rmdir", "os.truncate", "os.link", "os.symlink",
                         "os.chmod", "os.chown", "os.mkdir", "os.utime", "shutil.rmtree", "shutil.copyfile",
                         "shutil.move"})
WARN_EVENTS = frozenset({"sys.settrace", "sys.setprofile", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata",
                         "ctypes.addressof", "ctypes.string_at", "ctypes.wstring_at", "ctypes.call_function",
                         "socket.connect", "socket.bind", "sys.addaudithook", "os.putenv", "os.unsetenv",
                         "os.kill", "os.killpg"})
# Toolchain programs a legitimate kernel starts while it is timed: JIT compilers re-specialising on a new
# shape or re-capturing a graph (Triton's ptxas, torch.compile's C compiler). Their time counts in the
# measurement; they are believed only when the program lives in a trusted folder (an installation root
# or a system tool folder, where the guard also alarms on writes), so a script the solution wrote and
# named `ptxas` is not one, and they must have exited when the call returns (`threads.ChildWatch`).
TRUSTED_TOOLS = frozenset({"ptxas", "ptxas-blackwell", "nvcc", "nvlink", "fatbinary", "cicc", "cudafe++", "nvdisasm",
                           "cuobjdump", "cc", "gcc", "g++", "c++", "clang", "clang++", "ld", "ld.gold", "ld.lld", "as",
                           "ar", "ldconfig", "ldconfig.real", "x86_64-linux-gnu-gcc", "x86_64-linux-gnu-g++",
                           # `file -b python`: platform.architecture(), which Triton calls for its build key
                           "file"})
TOOL_DIRS = ("/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/lib", "/usr/libexec", "/usr/local/cuda",
             "/usr/local/nvidia", "/opt/nvidia")
# Modules (and their packages, never names that only start alike: a solution's own module is its own to
# rewrite, as CuTe DSL's @cute.jit does) whose functions' code or defaults the solution may not swap.
GUARDED_FUNCTION_MODULES = ("solbench", "__main__", "torch.cuda", "torch.random", "multiprocessing", "time", "gc",
                            "threading", "random", "pickle")
GUARDED_FUNCTION_PACKAGES = tuple(name + "." for name in GUARDED_FUNCTION_MODULES)
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def installation_roots() -> list[str]:
    """Folders whose files later runs import or read: the harness package, torch, triton, the standard
    library and site-packages (a .py or .pyc written there would run in the next orchestrator)."""
    roots = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    paths = sysconfig.get_paths()
    roots += [paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k)]
    roots += site.getsitepackages() + [site.getusersitepackages()]  # a venv over system packages: both
    for name in ("torch", "triton"):  # found without importing them (the worker imports triton lazily)
        spec = importlib.util.find_spec(name)
        roots += list(spec.submodule_search_locations or []) if spec is not None else []
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    roots += [d for d in (*TOOL_DIRS, cuda_home) if d and os.path.isdir(d)]
    # The C compilers the machine names (CC=/opt/gcc/bin/gcc on the GPU image; Triton builds its launchers
    # with it). Read before any solution code runs: a CC the solution sets later names nothing trusted.
    for compiler in (os.environ.get("CC"), os.environ.get("CXX")):
        found = shutil.which(compiler) if compiler else None
        if found:
            roots.append(os.path.dirname(os.path.realpath(found)))
    return roots


class GuardState:
    """What the hook reads and writes; the worker sets the phase and the protected folders."""

    def __init__(self) -> None:
        # [phase, protected roots (tuple of str), warnings (list), reported (set), harness native calls
        # in progress (int), trusted tools started while timed (int)]. The hook keeps a reference to this
        # list in its defaults; only the worker's code holds the GuardState.
        self.cell: list = [None, (), [], set(), 0, 0]

    @property
    def phase(self) -> str | None:
        return self.cell[0]

    @phase.setter
    def phase(self, value: str | None) -> None:
        self.cell[0] = value

    def protect(self, roots: list[str]) -> None:
        real = [os.path.realpath(r) for r in roots if r]
        self.cell[1] = tuple(sorted(set(real)))

    @contextlib.contextmanager
    def harness_native(self):
        """The harness's own ctypes calls (CUDA IPC in transfer.py) are not the solution's: the merely
        unusual events they raise are not reported while this is open. Alarms still are."""
        self.cell[4] += 1
        try:
            yield
        finally:
            self.cell[4] -= 1

    @property
    def tools_started(self) -> int:
        """How many trusted toolchain programs were started while timed (`threads.ChildWatch` reads it)."""
        return self.cell[5]

    def note(self, text: str) -> None:
        """A warning from the harness itself (reported once per process)."""
        if text not in self.cell[3]:
            self.cell[3].add(text)
            self.cell[2].append(text)

    def take_warnings(self) -> list[str]:
        """Warnings collected since the last call (each construct reported once per process)."""
        out = list(self.cell[2])
        self.cell[2].clear()
        return out


def install_audit_hook(alarm_fd: int | None, state: GuardState) -> None:
    """Install the hook; `alarm_fd` is the alarm channel's fd (None: alarms become warnings).

    Alarms are sent without blocking whatever the descriptor's flags: a channel the solution filled,
    closed or replaced ends the process (`ALARM_LOST_EXIT`), which the orchestrator judges REWARD_HACK;
    an alarm never quietly becomes a warning."""
    send = socket.socket(fileno=alarm_fd).send if alarm_fd is not None else None
    hook = _make_hook(send, state.cell)
    sys.addaudithook(hook)


def _written_into(event, args, roots, _fspath=os.fspath, _realpath=os.path.realpath, _sep=os.sep,
                 _isinstance=isinstance, _str=str, _bytes=bytes, _int=int, _len=len, _getattr=getattr,
                 _write_flags=WRITE_FLAGS):
    """The protected path a file event writes, or None (reads, and paths outside `roots`). Bound into the
    hook's defaults like everything it uses: rebinding this module's globals cannot reach the hook."""
    if event == "open":
        mode = args[1] if _len(args) > 1 else None
        flags = args[2] if _len(args) > 2 else 0
        writing = _isinstance(flags, _int) and flags & _write_flags
        if _isinstance(mode, _str):
            for c in "wax+":
                if c in mode:
                    writing = True
        if not writing:
            return None
    paths = [a for a in args[:2] if _isinstance(a, (_str, _bytes)) or _getattr(a, "__fspath__", None)]
    for p in paths:
        try:
            p = _fspath(p)
            if _isinstance(p, _bytes):
                p = p.decode("utf-8", "replace")
            real = _realpath(p)
        except Exception:  # noqa: BLE001
            continue
        for root in roots:
            if real == root or real.startswith(root + _sep):
                return real
    return None


def _trusted_tool(event, args, roots, _isinstance=isinstance, _str=str, _bytes=bytes, _len=len, _fspath=os.fspath,
                  _realpath=os.path.realpath, _basename=os.path.basename, _isabs=os.path.isabs, _join=os.path.join,
                  _isfile=os.path.isfile, _access=os.access, _environ=os.environ, _pathsep=os.pathsep, _sep=os.sep,
                  _tools=TRUSTED_TOOLS):
    """The program a process-start event runs, when it is a trusted toolchain program (by name, and
    living below a trusted root); None otherwise (a shell, a fork, an interpreter, anything else)."""
    if event == "subprocess.Popen":
        program, argv = (args[0] if _len(args) else None), (args[1] if _len(args) > 1 else None)
        if program is None:
            program = argv[0] if _isinstance(argv, (list, tuple)) and argv else None
    elif event in ("os.posix_spawn", "os.exec"):
        program = args[0] if _len(args) else None
    else:
        return None  # os.system, os.fork, pty.spawn...: a shell or a copy of this process, never a tool
    try:
        program = _fspath(program)
        if _isinstance(program, _bytes):
            program = program.decode("utf-8", "replace")
    except Exception:  # noqa: BLE001
        return None
    if not _isinstance(program, _str) or _basename(program) not in _tools:
        return None
    if not _isabs(program) and _sep not in program:
        found = [_join(d, program) for d in _str(_environ.get("PATH", "")).split(_pathsep)
                 if d and _isfile(_join(d, program)) and _access(_join(d, program), 1)]
        program = found[0] if found else program
    real = _realpath(program)
    for root in roots:
        if real.startswith(root + _sep):
            return real
    return None


def _make_hook(send, cell):  # noqa: C901 - one closed function on purpose (no patchable helpers)
    def hook(event, args, _cell=cell, _send=send, _dontwait=socket.MSG_DONTWAIT, _exit=os._exit,
             _lost=msg.ALARM_LOST_EXIT, _isinstance=isinstance, _str=str,
             _bytes=bytes, _len=len, _getattr=getattr, _alarm_events=ALARM_EVENTS, _process=PROCESS_EVENTS,
             _files=FILE_EVENTS, _warn=WARN_EVENTS, _env=PROTECTED_ENV, _env_prefixes=PROTECTED_ENV_PREFIXES,
             _guarded=GUARDED_FUNCTION_MODULES, _packages=GUARDED_FUNCTION_PACKAGES, _ftype=types.FunctionType,
             _written_into=_written_into, _trusted_tool=_trusted_tool):
        phase = _cell[0]
        if phase is None:
            return
        if event in _alarm_events:
            level, detail = 2, event
        elif event == "object.__setattr__":
            if _len(args) < 2 or args[1] not in ("__code__", "__defaults__", "__kwdefaults__"):
                return
            target = args[0]
            if not _isinstance(target, _ftype):
                return
            module = _str(_getattr(target, "__module__", "") or "")
            if module not in _guarded and not module.startswith(_packages):
                return
            level, detail = 2, f"replaced {args[1]} of {module}.{_getattr(target, '__qualname__', '?')}"
        elif event in _process:
            tool = _trusted_tool(event, args, _cell[1]) if phase == "timing" else None
            if tool is not None:
                _cell[5] += 1
                level, detail = 1, f"{event}: started the toolchain program {tool} while being timed (its time counts)"
            elif phase == "timing":
                what = args[0] if _len(args) and args[0] is not None else (args[1] if _len(args) > 1 else "")
                if _isinstance(what, (list, tuple)) and what:
                    what = what[0]
                level, detail = 2, f"{event}: started child processes while being timed ({_str(what)[:120]})"
            else:
                level, detail = 1, f"{event}: started child processes"
        elif event in ("os.putenv", "os.unsetenv"):
            key = args[0] if _len(args) else ""
            if _isinstance(key, _bytes):
                key = key.decode("utf-8", "replace")
            key = _str(key)
            if key in _env or key.startswith(_env_prefixes):
                level, detail = 2, f"{event} {key}: wrote a harness-controlled environment variable"
            else:
                level, detail = 1, f"{event} {key}: environment write"
        elif event in _files:
            hit = _written_into(event, args, _cell[1]) if _cell[1] and _len(args) else None
            if hit is None:
                return
            level, detail = 2, f"{event} {hit}: wrote into the problem folder or the harness"
        elif event in _warn:
            if _cell[4]:
                return
            level, detail = 1, event
        else:
            return
        reported = _cell[3]
        if detail in reported:
            return
        reported.add(detail)
        if level == 2 and _send is not None:
            data = (detail.replace("\n", " ") + "\n").encode("utf-8", "replace")
            try:
                if _send(data, _dontwait) == _len(data):
                    return
            except Exception:  # noqa: BLE001 - full, closed or replaced: the alarm cannot be delivered
                pass
            _exit(_lost)
        if _len(_cell[2]) < 50:
            _cell[2].append(("alarm: " if level == 2 else "") + detail)

    return hook


# -- integrity snapshot ----------------------------------------------------------------------------

_KEEP_KINDS = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType, type,
               staticmethod, classmethod, property, dict, types.MethodDescriptorType,
               types.WrapperDescriptorType, types.GetSetDescriptorType, types.MemberDescriptorType,
               types.ClassMethodDescriptorType, types.MethodWrapperType)


def _third_party() -> list[tuple[str, object, bool]]:
    """(label, namespace object, callables only) of non-harness namespaces the harness relies on."""
    spaces: list[tuple[str, object, bool]] = [
        ("builtins", builtins, True), ("time", time, True), ("gc", gc, True), ("threading", threading, True),
        ("os", os, True), ("random", random, True), ("random.SystemRandom", random.SystemRandom, False),
        ("pickle", pickle, True), ("io", io, True), ("math", math, True), ("sys", sys, True),
        ("multiprocessing.connection", connection, True),
        ("multiprocessing.connection.Connection", connection.Connection, False),
        ("torch", torch, True), ("torch.Tensor", torch.Tensor, False),
        ("torch._C.TensorBase", torch._C.TensorBase, False),
        ("torch.cuda", torch.cuda, True), ("torch.cuda.Event", torch.cuda.Event, False),
        ("torch.cuda.Stream", torch.cuda.Stream, False),
    ]
    return spaces


# Names torch itself rebinds at run time (importing Dynamo wraps torch.manual_seed); the harness does not use them.
# Process-wide hooks libraries legitimately install (the harness does not rely on them) are left out too.
_LEGITIMATELY_REBOUND = frozenset({"torch.manual_seed", "sys.excepthook", "sys.displayhook", "sys.breakpointhook",
                                   "sys.unraisablehook", "threading.excepthook", "os.register_at_fork"})


def _entries_for(label: str, space: object, callables_only: bool, entries: list, code_too: bool) -> None:
    mapping = vars(space)
    for key, value in list(mapping.items()):
        if key.startswith("__") and key.endswith("__") and key not in ("__init__", "__call__", "__torch_function__"):
            continue
        if f"{label}.{key}" in _LEGITIMATELY_REBOUND:
            continue
        if callables_only and not isinstance(value, _KEEP_KINDS):
            continue
        entries.append((f"{label}.{key}", 0, mapping, key, value))
        if code_too and isinstance(value, types.FunctionType):
            for attr in ("__code__", "__defaults__", "__kwdefaults__"):
                entries.append((f"{label}.{key}.{attr}", 1, value, attr, getattr(value, attr)))


def take_snapshot(extra: dict[str, dict] | None = None) -> tuple:
    """Entries (label, kind, holder, key, original) for everything the checker compares."""
    entries: list = []
    harness = sorted((name, mod) for name, mod in list(sys.modules.items())
                     if isinstance(mod, types.ModuleType)
                     and (name == "solbench" or name.startswith("solbench.") or name == "__main__"))
    for name, module in harness:
        entries.append((f"sys.modules[{name!r}]", 0, sys.modules, name, module))
        _entries_for(name, module, True, entries, code_too=True)
        for key, value in list(vars(module).items()):
            if isinstance(value, type) and getattr(value, "__module__", None) == module.__name__:
                _entries_for(f"{name}.{key}", value, False, entries, code_too=True)
    entries.append(("sys.modules", 0, vars(sys), "modules", sys.modules))
    for name in ("cupti", "cupti.cupti"):  # the CUPTI cross-check's bindings, when installed
        if name in sys.modules:
            entries.append((f"sys.modules[{name!r}]", 0, sys.modules, name, sys.modules[name]))
    for label, space, callables_only in _third_party():
        _entries_for(label, space, callables_only, entries, code_too=False)
    for label, mapping in (extra or {}).items():
        for key, value in list(mapping.items()):
            entries.append((f"{label}[{key!r}]", 0, mapping, key, value))
    return tuple(entries)


_MISSING = object()


def make_checker(snapshot: tuple) -> Callable[[], list[str]]:
    """A function listing the snapshot entries that no longer hold their original object.

    Everything it uses is bound in its defaults (a tuple of entries, builtins): rebinding module
    globals cannot blind it, and replacing its defaults or code is an audited, alarmed event.
    """

    def check(_entries=snapshot, _missing=_MISSING, _getattr=getattr, _len=len) -> list[str]:
        changed = []
        for label, kind, holder, key, original in _entries:
            try:
                current = holder.get(key, _missing) if kind == 0 else _getattr(holder, key, _missing)
            except Exception:  # noqa: BLE001 - a holder that raises has been tampered with too
                current = _missing
            if current is not original:
                changed.append(label)
                if _len(changed) >= 20:
                    break
        return changed

    return check
