"""`python -m solbench.worker`: the worker's entry point."""

from solbench.worker.main import main

main()
