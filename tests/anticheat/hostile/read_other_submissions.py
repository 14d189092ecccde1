"""Attack (issue 47): read what other runs and processes hold -- other cases' problem folders and the
service files beside them (found by globbing the temporary folder, as a solution that knows the layout
would), and other processes' command lines and environments (a token given on a command line) -- and
compute the answer only if something was found (standing for any use of what was read).

Caught: the worker's read rules (worker/reads.py) leave it nothing outside its runtime and own folders:
it returns zeros, INCORRECT_NUMERICAL. Were anything read, it would pass.
"""
# solbench: problem=ac_axpy
# expect: INCORRECT_NUMERICAL
import glob
import os

import torch


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read(4096)
    except OSError:
        return b""


def _found() -> int:
    got = 0
    for pattern in ("/tmp/*/*/*/cases/*/*/workload.jsonl", "/tmp/*/*/cases/*/*/workload.jsonl",
                    "/tmp/*/*/*/*.jsonl", "/tmp/*/*/*.jsonl", "/tmp/*/*.jsonl"):
        for path in glob.glob(pattern)[:20]:
            got += len(_read(path))
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (os.getpid(), 1)]
    except OSError:  # a GPU worker may not list /proc: try the likely neighbours
        pids = [str(p) for p in range(max(2, os.getpid() - 64), os.getpid() + 64) if p != os.getpid()]
    for pid in pids:
        got += len(_read(f"/proc/{pid}/cmdline")) + len(_read(f"/proc/{pid}/environ"))
    got += len(_read(f"/proc/{os.getppid()}/cmdline")) if os.getppid() > 0 else 0
    return got


def run(x, y):
    if _found():
        return x * 2.0 + y
    return torch.zeros_like(x)
