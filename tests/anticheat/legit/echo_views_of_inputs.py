"""Legitimate (issue 31): two outputs repeat inputs, and the solution returns them as views: the weight as
a broadcast view (`expand`, as a rotary embedding's cos/sin often is) and `x` itself. The values are
right when the call returns; they are judged by value and the trace is flagged `output_aliases_input`."""
# solbench: problem=ac_echo
# expect: PASSED
# expect-flag: output_aliases_input


def run(x, weight):
    return x * weight, weight.expand(x.shape[0], weight.shape[0]), x
