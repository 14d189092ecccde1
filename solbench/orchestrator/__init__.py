"""The orchestrator: the process that runs `solbench run`, the Python API and the pytest plugin.

It never imports solution code. It turns user options into a run (`config`), problems and solutions
into jobs (`jobs`), spreads them over devices (`scheduler`), and on each device drives a pair of worker
processes (`process`, `session`) through the evaluation of every workload (`evaluate`, `trials`,
`timed`, `verdict`), writing a trace as each one finishes.
"""
