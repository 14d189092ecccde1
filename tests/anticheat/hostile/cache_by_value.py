"""Attack: cache answers keyed by a fingerprint of the input values; once a handful of distinct inputs
has been seen, assume the harness is rotating a few fixed sets and replay instead of computing.

This passes a harness that rotates a few input sets through the timed iterations (every replay is
right). Caught: every call gets inputs drawn from fresh entropy, so the replayed answer is wrong and
the verified timed outputs show it: INCORRECT_NUMERICAL.
"""
# solbench: problem=ac_axpy
# expect: INCORRECT_NUMERICAL
# expect-log: timed iteration
_cache = {}


def run(x, y):
    n = x.shape[0]
    key = (n, tuple(x[:4].tolist()), tuple(y[:4].tolist()))
    if key in _cache:
        return _cache[key].clone()
    seen = [v for k, v in _cache.items() if k[0] == n]
    if len(seen) >= 8:
        return seen[-1].clone()
    out = x * 2.0 + y
    _cache[key] = out.clone()
    return out
