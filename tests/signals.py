"""What tests that press Ctrl-C on a child process share."""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """In the child (a `preexec_fn`): Ctrl-C at its default, as in a terminal, even where the tests run with
    SIGINT ignored (a background job of a non-interactive shell, as CI may start them), which a child would
    inherit and then never see."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
