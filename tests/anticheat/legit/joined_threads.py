"""Legitimate: splits the work over two Python threads and joins them before returning."""
# solbench: problem=ac_axpy
# expect: PASSED
import threading

import torch


def _part(x, y, out, lo, hi):
    torch.add(y[lo:hi], x[lo:hi], alpha=2.0, out=out[lo:hi])


def run(x, y):
    out = torch.empty_like(x)
    half = x.shape[0] // 2
    threads = [threading.Thread(target=_part, args=(x, y, out, 0, half)),
               threading.Thread(target=_part, args=(x, y, out, half, x.shape[0]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out
