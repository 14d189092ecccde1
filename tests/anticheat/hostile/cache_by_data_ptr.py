"""Attack: cache the answer by the inputs' addresses and replay it when an address comes back.

Caught: every call sees a fresh input set (fresh values, not only fresh addresses) and the sampled
timed outputs are verified; a replayed answer is wrong: INCORRECT_NUMERICAL.
"""
# solbench: problem=ac_axpy
# expect: INCORRECT_NUMERICAL
_cache = {}


def run(x, y):
    key = (x.data_ptr(), y.data_ptr(), x.shape[0])
    if key in _cache:
        return _cache[key].clone()
    out = x * 2.0 + y
    _cache[key] = out.clone()
    return out
