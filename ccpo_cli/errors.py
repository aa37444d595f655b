"""Errors that carry the CLI contract's exit codes.

Library code raises these; the CLI layer turns them into one line on stderr and the exit
code, never a traceback (docs/architecture.md §4:
1 runtime, 2 usage, 3 invalid input, 4 remote).
"""


class CcpoError(Exception):
    exit_code = 1

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(CcpoError):
    exit_code = 2


class InvalidInput(CcpoError):
    """Malformed file, failed validation, or a refused operation."""

    exit_code = 3


class RemoteError(CcpoError):
    """Network, authentication or remote conflict."""

    exit_code = 4
