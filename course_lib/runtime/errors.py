"""One exception type for every mistake a user can make, helpers that word its messages, and the command
lines' shared parser and error reporter.

The CLI and the notebook config cells catch `UsageError` and print its message on one line
(exit code 2) instead of a traceback: the message must name the bad value and the valid ones.
Every entry point (`python -m course_lib` and each command it hands its arguments to: notebooks, sweep,
collect, ...) builds its parser from `Parser` and runs through `report_errors`; they live here, the bottom
layer, so that no entry point imports another to get them.
"""
import argparse
import sys


class UsageError(ValueError):
    """A bad task, option, path or file: the message says what is wrong and what is valid."""


def choice_error(what: str, value, valid) -> UsageError:
    """Build the standard 'unknown X' error, e.g. unknown task 'sst3' (valid: cola, sst2, ...)."""
    return UsageError(f"unknown {what} {value!r} (valid: {', '.join(sorted(map(str, valid)))})")


def name_key(text: str) -> str:
    """A name as lookups compare it, ignoring case and dashes: 'SST-2' and 'sst2' are one name."""
    return text.lower().replace("-", "")


def find_named(what: str, name: str, table: dict):
    """table's entry for name, ignoring case and dashes ('SST-2', 'sst2', 'STS-B'), else the one-line error."""
    found = [value for entry, value in table.items() if name_key(entry) == name_key(name)]
    if not found:
        raise choice_error(what, name, table)
    return found[0]


class RunFailed(RuntimeError):
    """A run that cannot go on (a NaN loss, say); the message says why and what was kept."""


class Preempted(Exception):
    """The scheduler asked the run to stop (SIGTERM, or Slurm's --signal USR1): a checkpoint was saved at the step
    boundary, and the same command resumes there. Exit code PREEMPTED, so a job script can requeue on it."""


PREEMPTED = 75  # the exit code of a preempted run: sysexits' EX_TEMPFAIL, "try again later"


class Parser(argparse.ArgumentParser):
    """argparse, but its errors raise UsageError (one line), and an unknown option lists the valid ones."""

    def error(self, message: str):
        raise UsageError(message)

    def options(self) -> list[str]:
        return sorted(o for a in self._actions for o in a.option_strings if o.startswith("--") and o != "--help")

    def parse_strict(self, argv: list[str] | None) -> argparse.Namespace:
        args, extra = self.parse_known_args(sys.argv[1:] if argv is None else argv)
        if extra:
            raise UsageError(f"unknown option {extra[0]!r} (valid: {', '.join(self.options())})")
        return args


def report_errors(body, interrupted: str) -> int:
    """Run body() and turn a user's mistake or a failed run into one line on stderr and an exit code."""
    try:
        return body()
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except RunFailed as err:
        print(f"run failed: {err}", file=sys.stderr)
        return 1
    except Preempted as err:
        print(f"preempted: {err}", file=sys.stderr)
        return PREEMPTED
    except KeyboardInterrupt:
        print(f"interrupted: {interrupted}", file=sys.stderr)
        return 130
