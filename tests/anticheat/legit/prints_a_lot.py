"""Legitimate: correct, but prints a lot on every call (the log is capped; nothing is parsed from it)."""
# solbench: problem=ac_axpy
# expect: PASSED
import json


def run(x, y):
    for i in range(50):
        print(json.dumps({"ok": True, "status": "PASSED", "line": i, "note": "debug output " * 4}))
    return x * 2.0 + y
