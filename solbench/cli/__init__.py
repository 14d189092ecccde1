"""`solbench` command line: one module per sub-command, each exposing `register(subparsers)`."""

from __future__ import annotations

import argparse
import atexit
import importlib
import os
import pkgutil
import signal
import sys
import threading

from solbench import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="solbench", description="Grade GPU kernels against the speed of light.")
    parser.add_argument("--version", action="version", version=f"solbench {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    package = sys.modules[__name__]
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "register"):
            module.register(subparsers)
    return parser


EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143
_received: list[int] = []  # the interrupting signals received (SIGINT, SIGTERM, SIGHUP)
# Set by any of them: a KeyboardInterrupt can be lost (C code that clears every error while a module
# imports), the event is not; a run polls it (`run_jobs(stop=...)`) and stops as on Ctrl-C.
stop_requested = threading.Event()


RESEND_S = 0.05  # how soon a signal that came during an import is sent again


def _importing(frame) -> bool:
    """Whether `frame` runs inside an import (importlib's own frames are on its stack)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _resend(signum: int) -> None:
    if signal.getsignal(signum) is _interrupt:  # not once the command has ended and the handlers are restored
        os.kill(os.getpid(), signum)


def _interrupt(signum, frame) -> None:
    """Record the stop and raise KeyboardInterrupt, but never inside an import. A module's top level may run
    beneath C++ (torch's `_c10d_init` imports Python through pybind11), and an exception raised there cannot
    cross it: pybind11 throws `error_already_set` where no C++ catches it, and the process aborts (exit 134,
    seen when a SIGTERM came 1.07 s into `run`). So during an import the signal is only recorded, and sent
    again shortly, until it lands where Python can raise it."""
    _received.append(signum)
    stop_requested.set()
    if _importing(frame):
        timer = threading.Timer(RESEND_S, _resend, (signum,))
        timer.daemon = True
        timer.start()
        return
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _unraisable(previous):
    """A hook for exceptions Python cannot raise where they happen: a signal handled inside a weakref callback
    (importlib's module-lock clean-up during an import) or a `__del__` prints "Exception ignored in" with a
    traceback, and the KeyboardInterrupt goes no further. The stop is not lost (`stop_requested` is set and
    polled), so such an interrupt is not printed; every other exception is, as before."""
    def hook(unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and _received:
            return
        previous(unraisable)
    return hook


def _exit_code() -> int:
    return EXIT_TERMINATED if any(s != signal.SIGINT for s in _received) else EXIT_INTERRUPTED


def after_interrupt(exc: BaseException) -> bool:
    """Whether `exc` is an interrupt, or was raised while one was being handled (an import cut short by Ctrl-C
    leaves a module half-initialised, and the clean-up that follows may trip over it): either way the user
    asked to stop, and gets one line, not a traceback."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__context__
    return False


def main(argv: list[str] | None = None) -> int:
    # A terminal hang-up or a `kill` ends a run as Ctrl-C does: workers killed, finished traces kept.
    # (A SIGKILL leaves no say: the workers then die with the orchestrator, worker/sandbox.py.)
    main_thread = threading.current_thread() is threading.main_thread()
    stop_requested.clear()
    del _received[:]
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, _interrupt) for s in signals} if main_thread else {}
    previous_hook, sys.unraisablehook = sys.unraisablehook, _unraisable(sys.unraisablehook)
    try:
        code = _main(argv)
        # A command that stopped on a signal says 130; SIGTERM and SIGHUP make it 143, as `serve` exits
        return _exit_code() if code == EXIT_INTERRUPTED and _received else code
    except Exception as exc:  # noqa: BLE001 - only what an interrupt caused; anything else is re-raised
        if not (after_interrupt(exc) or _received):
            raise
        print("interrupted", file=sys.stderr)
        return _exit_code()
    except KeyboardInterrupt:  # before a command could catch it (its options still being read)
        print("interrupted", file=sys.stderr)
        return _exit_code()
    finally:
        sys.unraisablehook = previous_hook
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def console_main() -> None:
    """The `solbench` command (and `python -m solbench`). Once the command has returned, with its results
    written, its workers stopped and its files closed, the process ends without the interpreter's teardown:
    the exit handlers run (scratch folders removed, Ray disconnected), standard output and error are
    flushed, then `os._exit`. Tearing down torch's and triton's modules took about 1 s after every run on a
    GPU host (`--timeline`'s exit against the wall time), and freezing the objects instead left triton's
    nanobind printing pages of "leaked instance" warnings. A command that raises exits the usual way."""
    try:
        code = main()
    except KeyboardInterrupt:  # a second Ctrl-C while the first one's clean-up ran
        code = EXIT_INTERRUPTED
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said there
            pass
    atexit._run_exitfuncs()  # what a normal exit runs first; the interpreter's module teardown is skipped
    os._exit(code if isinstance(code, int) and 0 <= code < 256 else 1)


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)  # before a run started: no trace file to speak of
        return _exit_code()


if __name__ == "__main__":
    sys.exit(main())
