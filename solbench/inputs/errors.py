"""The two ways input generation fails, kept apart so the runner can map them to statuses.

`InputError`: inputs could not be produced as declared. `blame` says whose fault it is:
"reference" (its custom inputs entrypoint raised or returned something that does not fit the
declared inputs: the runner reports INVALID_REFERENCE) or "workload" (the definition/workload
pair is inconsistent, e.g. a scalar that does not fit its dtype, or a blob of the wrong shape:
RUNTIME_ERROR). `MissingDataError`: a safetensors file or key is not available on this machine
(the runner reports MISSING_DATA and carries on; never a crash).
"""

from __future__ import annotations


class InputError(RuntimeError):
    """Inputs could not be produced as declared."""

    def __init__(self, message: str, *, blame: str = "workload"):
        super().__init__(message)
        self.blame = blame


class MissingDataError(InputError):
    """A workload needs data (a safetensors file or key) that is not present on this machine."""

    def __init__(self, message: str):
        super().__init__(message, blame="data")
