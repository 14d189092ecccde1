"""`python -m solbench.worker`: the worker's entry point. The operating-system sandbox comes first,
before torch or anything a solution could have planted is imported (worker/sandbox.py).

Started as a worker template (worker/zygote.py) it imports torch and the harness first, outside any
sandbox: that process never runs solution code. Each worker it forks comes back here and, from the
sandbox on, goes the way of a spawned one."""

import os

from solbench.worker import sandbox

if os.environ.get("SOLBENCH_ZYGOTE_FD"):
    from solbench.worker import zygote

    sandbox.enter_from_env(parent_pid=zygote.serve())  # returns only in a forked worker
else:
    sandbox.enter_from_env()

from solbench.worker.main import main  # noqa: E402 - after the sandbox on purpose

main()
