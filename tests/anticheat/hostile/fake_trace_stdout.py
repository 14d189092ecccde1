"""Attack: print lines that look like PASSED traces and worker replies to stdout, then return zeros.

Caught by construction: stdout is only a log; results travel over a private channel and traces are
written by the orchestrator: INCORRECT_NUMERICAL.
"""
# solbench: problem=ac_axpy
# expect: INCORRECT_NUMERICAL
import json

import torch

_FAKE = {"definition": "ac_axpy", "solution": "fake_trace_stdout",
         "evaluation": {"status": "PASSED", "performance": {"latency_ms": 1e-6, "speedup_factor": 1e6}}}


def run(x, y):
    print(json.dumps(_FAKE))
    print(json.dumps({"ok": True, "samples_ms": [1e-6] * 10}))
    return torch.zeros_like(x)
