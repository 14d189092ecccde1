"""A worker started as root gives up root's powers before any solution code runs.

Root in a CI container keeps every capability unless told otherwise: it could open block devices,
`mknod`, `mount`, open raw sockets, or `ptrace` another user's process. `drop_all` clears the five
capability sets (bounding, ambient, inheritable, permitted, effective), in that order because dropping
the bounding set needs CAP_SETPCAP, which the last step takes away. With `no_new_privs` set, no later
`execve` (a setuid binary, file capabilities) can give any back. uid 0 stays uid 0, so files owned by
root stay writable by their owner's rights: Landlock (worker/sandbox.py) is what keeps writes out of them.
"""

from __future__ import annotations

import ctypes
import os

PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522
SETS = ("CapBnd", "CapAmb", "CapInh", "CapPrm", "CapEff")  # as /proc/self/status names them

_libc = ctypes.CDLL(None, use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def held() -> dict[str, int]:
    """Each capability set of this process, as a bit mask (0: empty)."""
    masks = {}
    with open("/proc/self/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in SETS:
                masks[name] = int(value.strip(), 16)
    return masks


def _last_capability() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 63


def drop_all() -> str:
    """Clear every capability set; raises OSError when one stays non-empty where it matters."""
    bounding_denied = False
    for cap in range(_last_capability() + 1):
        if _libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), ctypes.c_ulong(0), ctypes.c_ulong(0),
                       ctypes.c_ulong(0)) < 0:
            bounding_denied = True  # no CAP_SETPCAP: an ordinary user, who holds nothing to drop
    _libc.prctl(PR_CAP_AMBIENT, ctypes.c_ulong(PR_CAP_AMBIENT_CLEAR_ALL), ctypes.c_ulong(0), ctypes.c_ulong(0),
                ctypes.c_ulong(0))
    header = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()  # all zero: nothing effective, permitted or inheritable
    if _libc.capset(ctypes.byref(header), data) < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capset: {os.strerror(err)}")
    left = {name: mask for name, mask in held().items() if mask}
    if left.keys() - {"CapBnd"} or (left and not bounding_denied):
        raise OSError(f"capabilities still held: {left}")
    if left:  # an ordinary user: the bounding set only limits what execve could grant, and no_new_privs grants none
        return "none held (bounding set kept: not ours to drop; no_new_privs keeps execve from granting any)"
    return "all cleared (bounding, ambient, inheritable, permitted, effective)"
