"""Legitimate (agent style): a thread pool created at import; every call splits the rows into chunks,
the pool's threads compute their chunks (on the caller's stream, on a GPU) and the call waits for
every future before it returns. The pool's idle threads persist between calls.
"""
# solbench: problem=ac_rmsnorm
# expect: PASSED
from concurrent.futures import ThreadPoolExecutor

import torch

_POOL = ThreadPoolExecutor(max_workers=3, thread_name_prefix="rmsnorm")


def _chunk(x, weight, out, lo, hi, stream):
    def compute():
        part = x[lo:hi]
        rstd = torch.rsqrt(part.pow(2).mean(dim=-1, keepdim=True) + 1e-6)
        torch.mul(part * rstd, weight, out=out[lo:hi])

    if stream is None:
        compute()
    else:
        with torch.cuda.stream(stream):  # threads start on the default stream: use the caller's
            compute()


def run(x, weight, out):
    n_rows = x.shape[0]
    stream = torch.cuda.current_stream() if x.is_cuda else None
    step = max(1, -(-n_rows // 3))
    futures = [_POOL.submit(_chunk, x, weight, out, lo, min(lo + step, n_rows), stream)
               for lo in range(0, n_rows, step)]
    for future in futures:
        future.result()
