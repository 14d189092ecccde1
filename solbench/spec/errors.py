"""The one exception type for bad input files, so callers can turn it into a clear message."""

import json


class SpecError(ValueError):
    """A problem, workload, solution or trace file is malformed or inconsistent."""

    def __init__(self, message: str, *, where: str | None = None):
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)

    def located(self, where: str) -> "SpecError":
        """The same error, prefixed with the file (and line) it came from."""
        return SpecError(str(self), where=where) if self.where is None else self


def first_line(exc: BaseException) -> str:
    """One line of an error from a library (some span a page); the type's name when it says nothing."""
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def json_error(exc: json.JSONDecodeError) -> str:
    """A JSON parse error as a whole phrase: `not valid JSON at line 11 column 13: invalid control character`
    (the decoder's own message ends mid-phrase, 'Invalid control character at', before its position)."""
    message = exc.msg.removesuffix(" at")
    return f"not valid JSON at line {exc.lineno} column {exc.colno}: {message[:1].lower()}{message[1:]}"
