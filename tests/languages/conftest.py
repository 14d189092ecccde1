"""The runner fixtures, shared with tests/runner."""

from tests.runner.conftest import fast_config  # noqa: F401
