"""The worker: a subprocess that loads one solution (or the reference) and runs it on request.

Started as `python -P -m solbench.worker` by the orchestrator (`solbench.orchestrator.process`); it
talks only over an inherited channel (`solbench.protocol`). Everything that runs inside the process
that also runs solution code lives here: the request handlers (`calls`, `timed_block`, `baselines`),
the input cache, CUDA IPC (`transfer`), the in-process guard (`guard`) and the escaped-work probe
(`probe`). This package's modules import everything they need at the top: it is all bound before the
guard snapshots the harness and before any solution code is imported.
"""
