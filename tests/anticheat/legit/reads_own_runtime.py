"""Legitimate (issue 47): what honest code reads inside the worker's read rules: a standard-library
module imported at call time, torch's own files, its own /proc entry and its threads', the CPU's
description, a file it wrote in its temporary folder."""
# solbench: problem=ac_axpy
# expect: PASSED
import os
import tempfile
import threading

import torch


def _reads() -> bool:
    import xml.dom.minidom  # noqa: F401 - a module nothing imported before: the stdlib is readable

    with open(torch.__file__, "rb") as f:
        ok = bool(f.read(16))
    for path in ("/proc/self/status", "/proc/cpuinfo"):
        with open(path, "rb") as f:
            ok = ok and bool(f.read(16))
    box = []
    worker = threading.Thread(target=lambda: box.append(open("/proc/thread-self/stat", "rb").read(8)))
    worker.start()
    worker.join()
    with tempfile.NamedTemporaryFile("w+", dir=tempfile.gettempdir()) as f:
        f.write("mine")
        f.flush()
        ok = ok and open(f.name).read() == "mine"
    return ok and bool(box and box[0]) and os.path.isdir(os.path.dirname(torch.__file__))


def run(x, y):
    if not _reads():
        raise RuntimeError("a read honest code needs was refused")
    return x * 2.0 + y
