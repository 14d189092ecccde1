"""`python -m solbench.worker`: the worker's entry point. The operating-system sandbox comes first,
before torch or anything a solution could have planted is imported (worker/sandbox.py)."""

from solbench.worker import sandbox

sandbox.enter_from_env()

from solbench.worker.main import main  # noqa: E402 - after the sandbox on purpose

main()
