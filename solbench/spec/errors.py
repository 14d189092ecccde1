"""The one exception type for bad input files, so callers can turn it into a clear message."""


class SpecError(ValueError):
    """A problem, workload, solution or trace file is malformed or inconsistent."""

    def __init__(self, message: str, *, where: str | None = None):
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)

    def located(self, where: str) -> "SpecError":
        """The same error, prefixed with the file (and line) it came from."""
        return SpecError(str(self), where=where) if self.where is None else self
