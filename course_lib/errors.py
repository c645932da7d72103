"""One exception type for every mistake a user can make.

The CLI and the notebook config cells catch `UsageError` and print its message on one line
(exit code 2) instead of a traceback: the message must name the bad value and the valid ones.
"""


class UsageError(ValueError):
    """A bad task, option, path or file: the message says what is wrong and what is valid."""


def choice_error(what: str, value, valid) -> UsageError:
    """Build the standard 'unknown X' error, e.g. unknown task 'sst3' (valid: cola, sst2, ...)."""
    return UsageError(f"unknown {what} {value!r} (valid: {', '.join(sorted(map(str, valid)))})")


class RunFailed(RuntimeError):
    """A run that cannot go on (a NaN loss, say); the message says why and what was kept."""
