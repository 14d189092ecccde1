"""`solbench serve`: one long-lived process per host that owns its GPUs and judges submissions over HTTP.

The same harness as `solbench run` (`orchestrator.session_pool.SessionPool`, one per device), kept warm
between submissions: `submissions` (the queue, each submission's state and its trace file), `lanes` (a
device's warm workers and the thread that feeds them), `reference_cache` (the reference's timings reused
across the candidates of a problem), `requests` (a submit request's fields checked), `auth` (who may call),
`app` (the HTTP routes), `client` (the Python client, `solbench.api.Client`). docs/agents.md is the user's page.
"""
