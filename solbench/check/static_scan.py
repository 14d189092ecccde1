"""A static scan of solution sources for constructs that deserve a second look.

Findings are warnings in the trace, not verdicts: legitimate kernels use threads or ctypes too.
The scan is one layer; isolation and output verification are what actually stop cheating.
"""

from __future__ import annotations

import ast
import re
from pathlib import PurePosixPath

from solbench.languages import PYTHON_SUFFIXES
from solbench.spec.solution import Solution

# (pattern name, why it matters)
_MODULES = {
    "ctypes": "ctypes gives raw memory access",
    "gc": "gc can find the harness's objects",
    "inspect": "inspect can read the harness's frames",
    "threading": "threads can hide work from the timer",
    "multiprocessing": "processes can hide work from the timer",
    "subprocess": "subprocesses can hide work or build code at run time",
    "concurrent": "executors can hide work from the timer",
    "importlib": "importlib can reload or replace modules",
    "builtins": "builtins can be patched",
    "signal": "signal handlers can interfere with the harness",
    "socket": "network access is not needed by a kernel",
}
_CALLS = {
    "sys._getframe": "reads the caller's frames",
    "sys.settrace": "traces the harness",
    "sys.setprofile": "profiles the harness",
    "os.environ": "environment writes change the harness or library behaviour",
    "os.fork": "forks a hidden process",
    "os.system": "runs a shell",
    "torch.manual_seed": "reseeds the global RNG",
    "torch.cuda.manual_seed": "reseeds the global RNG",
    "torch.cuda.manual_seed_all": "reseeds the global RNG",
    "random.seed": "reseeds the global RNG",
    "numpy.random.seed": "reseeds the global RNG",
    "np.random.seed": "reseeds the global RNG",
    "torch.cuda.synchronize": "patching or calling it inside a kernel is unusual",
    "sys._current_frames": "reads every thread's frames",
    "sys.addaudithook": "audit hooks watch the harness",
    "os.dup": "duplicates file descriptors (the harness's channels are descriptors)",
    "os.dup2": "replaces file descriptors (the harness's channels are descriptors)",
    "os.close": "closes file descriptors it did not open",
    "os.fstat": "inspects file descriptors",
    "os.putenv": "environment writes change the harness or library behaviour",
    "os.kill": "signals processes",
    "os.fdopen": "opens a stream on a raw file descriptor",
    "signal.signal": "signal handlers can interfere with the harness",
    "importlib.reload": "reloads modules",
    "torch.cuda.Stream": "side streams must be joined to the current stream before returning",
    "torch.cuda.stream": "side streams must be joined to the current stream before returning",
    "torch.cuda.ExternalStream": "side streams must be joined to the current stream before returning",
    "torch.random.manual_seed": "reseeds the global RNG",
    "torch.seed": "reseeds the global RNG",
    "torch.cuda.Event": "kernels do not need timing events",
    "time.perf_counter": "kernels do not need clocks",
    "load_inline": "builds code at run time",
}
# Attributes that reach into frames, closures and function internals (reading the harness's state).
_ATTRIBUTES = {
    "f_back": "walks up the call stack into the harness's frames",
    "f_locals": "reads a frame's local variables",
    "f_globals": "reads a frame's globals",
    "tb_frame": "reaches frames through a traceback",
    "gi_frame": "reaches frames through a generator",
    "cell_contents": "reads or rewrites a closure",
    "__closure__": "reads a function's closure",
    "__globals__": "reads a function's module globals",
    "send_bytes": "writes on a raw connection (the harness's channel?)",
    "recv_bytes": "reads a raw connection (the harness's channel?)",
    "data_ptr": "keys on addresses: results cached by address are replayed wrongly",
    "share_memory_": "shares memory with other processes",
    "as_subclass": "tensor subclasses can be lazy outputs",
    "write_text": "writes files",
    "write_bytes": "writes files",
}
_TENSOR_HOOKS = ("__torch_function__", "__torch_dispatch__")
_STATUS_WORDS = re.compile(r"""['"](PASSED|REWARD_HACK|INCORRECT_NUMERICAL)['"]""")
_PROBLEM_FILES = ("definition.json", "workload.jsonl", "config.json")
_ASSIGNED_ATTRIBUTES = {
    "__code__": "swaps a function's code",
    "__defaults__": "swaps a function's defaults",
    "__kwdefaults__": "swaps a function's defaults",
    "__class__": "changes an object's class",
    "__dict__": "replaces an object's namespace",
}
_HARNESS_MODULES = {"solbench": "imports the harness (its objects live in the same process)",
                    "__main__": "reaches the worker's main module (the harness)"}
_PROC_PATH = re.compile(r"""['"]/proc/(self|\{|[0-9])|/proc/['"]|getppid""")
_SYS_MODULES_WRITE = re.compile(r"sys\.modules\s*\[[^\]]+\]\s*=|sys\.modules\.(update|pop|setdefault)\(")
_SETATTR_PATCH = re.compile(r"\b(setattr\s*\(\s*(torch|time|solbench|gc|threading)\b|"
                            r"(torch|time|solbench)(\.\w+)+\s*=(?!=))")
_CPP = {
    "cudaStreamCreate": "creates its own stream (work must be joined to the current stream)",
    "cudaDeviceSetLimit": "changes device limits",
    "dlopen": "loads libraries at run time",
    "cudaMallocManaged": "managed memory",
    "pthread_create": "starts threads",
    "fork(": "forks a hidden process",
}


def scan_source(path: str, content: str) -> list[str]:
    """Warnings for one source file, each `path:line: construct (why)`."""
    if PurePosixPath(path).suffix not in PYTHON_SUFFIXES:
        return [f"{path}:{_line_of(content, token)}: {token} ({why})" for token, why in _CPP.items() if token in content]
    findings: list[str] = []
    try:
        tree = ast.parse(content)
    except SyntaxError:
        return findings  # the loader reports syntax errors
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                top = name.split(".")[0]
                if top in _MODULES:
                    findings.append(f"{path}:{node.lineno}: imports {name} ({_MODULES[top]})")
                if top in _HARNESS_MODULES:
                    findings.append(f"{path}:{node.lineno}: imports {name} ({_HARNESS_MODULES[top]})")
        elif isinstance(node, (ast.Attribute, ast.Name)):
            dotted = _dotted(node)
            if dotted in _CALLS and not isinstance(getattr(node, "ctx", None), ast.Del):
                findings.append(f"{path}:{node.lineno}: uses {dotted} ({_CALLS[dotted]})")
            if isinstance(node, ast.Attribute):
                if node.attr in _ATTRIBUTES:
                    findings.append(f"{path}:{node.lineno}: uses .{node.attr} ({_ATTRIBUTES[node.attr]})")
                if node.attr in _ASSIGNED_ATTRIBUTES and isinstance(node.ctx, ast.Store):
                    findings.append(f"{path}:{node.lineno}: assigns .{node.attr} ({_ASSIGNED_ATTRIBUTES[node.attr]})")
        elif isinstance(node, ast.ClassDef):
            bases = [_dotted(b) for b in node.bases]
            if any(b in ("torch.Tensor", "Tensor") for b in bases):
                findings.append(f"{path}:{node.lineno}: defines a tensor subclass {node.name} (outputs must be plain tensors)")
        elif isinstance(node, ast.FunctionDef) and node.name in _TENSOR_HOOKS:
            findings.append(f"{path}:{node.lineno}: defines {node.name} (intercepts torch calls, lazy outputs)")
        elif isinstance(node, ast.Subscript) and _dotted(node.value) == "sys.modules":
            key = node.slice.value if isinstance(node.slice, ast.Constant) else None
            if isinstance(key, str) and (key.split(".")[0] in _HARNESS_MODULES or key.split(".")[0] in
                                         ("torch", "triton", "time", "gc", "threading")):
                findings.append(f"{path}:{node.lineno}: reaches sys.modules[{key!r}] (harness or timing modules)")
    for number, line in enumerate(content.splitlines(), 1):
        if _SYS_MODULES_WRITE.search(line):
            findings.append(f"{path}:{number}: writes sys.modules (can replace modules the harness uses)")
        if _SETATTR_PATCH.search(line):
            findings.append(f"{path}:{number}: assigns to an attribute of torch/time/solbench (monkey-patching)")
        if _STATUS_WORDS.search(line):
            findings.append(f"{path}:{number}: spells a trace status (results only travel on the harness's channel)")
        if _PROC_PATH.search(line):
            findings.append(f"{path}:{number}: reads /proc or the parent process (file descriptors, the orchestrator)")
    return sorted(set(findings), key=lambda f: (f.split(":")[0], int(f.split(":")[1])))


def scan_solution(solution: Solution) -> list[str]:
    findings: list[str] = []
    for source in solution.sources:
        findings += scan_source(source.path, source.content)
        name = PurePosixPath(source.path).name
        if name in _PROBLEM_FILES:
            findings.append(f"{source.path}:0: ships a file named like a problem file (it lands in the worker's "
                            f"scratch folder, never beside the problem)")
    return findings


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _line_of(content: str, token: str) -> int:
    index = content.find(token)
    return content.count("\n", 0, index) + 1 if index >= 0 else 0
