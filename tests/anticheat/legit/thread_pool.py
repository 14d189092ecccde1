"""Legitimate: a thread pool created at import whose idle workers persist between calls; every call
waits for its futures before returning."""
# solbench: problem=ac_axpy
# expect: PASSED
from concurrent.futures import ThreadPoolExecutor

import torch

_pool = ThreadPoolExecutor(max_workers=2)


def _part(x, y, out, lo, hi):
    torch.add(y[lo:hi], x[lo:hi], alpha=2.0, out=out[lo:hi])


def run(x, y):
    out = torch.empty_like(x)
    half = x.shape[0] // 2
    futures = [_pool.submit(_part, x, y, out, 0, half), _pool.submit(_part, x, y, out, half, x.shape[0])]
    for f in futures:
        f.result()
    return out
