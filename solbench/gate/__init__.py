"""The pytest gate (`pytest --solbench solutions/`): its session state and its items; the hooks are in
`solbench.pytest_plugin`, the module the `pytest11` entry point names."""
