"""Checking a solution: its outputs' structure (`outputs`) and numbers (`correctness`, `numerics_flags`),
both run in the workers (the reference worker judges), and the signs of cheating (`anticheat`,
`static_scan`), which the orchestrator screens. Nothing is imported here: the orchestrator's modules stay
free of torch until a run needs it."""
