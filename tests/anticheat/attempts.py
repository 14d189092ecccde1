"""Source text hostile test solutions include: `attempt(action)` runs one forbidden action and names how it
ended ("ok", or the errno's name), whether the action raises OSError or returns a libc-style -1."""

ATTEMPT = '''
def attempt(action):
    try:
        result = action()
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    if isinstance(result, int) and result < 0:
        return errno.errorcode.get(ctypes.get_errno(), "?")
    return "ok"
'''
