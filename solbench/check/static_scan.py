"""A static scan of solution sources for constructs that deserve a second look.

Findings are warnings in the trace, not verdicts: legitimate kernels use threads or ctypes too.
The scan is one layer; isolation and output verification are what actually stop cheating.
"""

from __future__ import annotations

import ast
import re
from pathlib import PurePosixPath

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
    "torch.cuda.Event": "kernels do not need timing events",
    "time.perf_counter": "kernels do not need clocks",
    "load_inline": "builds code at run time",
}
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
    if PurePosixPath(path).suffix != ".py":
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
        elif isinstance(node, (ast.Attribute, ast.Name)):
            dotted = _dotted(node)
            if dotted in _CALLS and not isinstance(getattr(node, "ctx", None), ast.Del):
                findings.append(f"{path}:{node.lineno}: uses {dotted} ({_CALLS[dotted]})")
    for number, line in enumerate(content.splitlines(), 1):
        if _SYS_MODULES_WRITE.search(line):
            findings.append(f"{path}:{number}: writes sys.modules (can replace modules the harness uses)")
        if _SETATTR_PATCH.search(line):
            findings.append(f"{path}:{number}: assigns to an attribute of torch/time/solbench (monkey-patching)")
    return sorted(set(findings), key=lambda f: (f.split(":")[0], int(f.split(":")[1])))


def scan_solution(solution: Solution) -> list[str]:
    findings: list[str] = []
    for source in solution.sources:
        findings += scan_source(source.path, source.content)
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
