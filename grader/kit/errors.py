"""The kit's one exception family. Library code raises a `KitError` subclass; only the
command-line entry points (the `main()` of `autograde`, `authoring.build`,
`authoring.examples`, `publish.export`, `publish.compat`) turn one into its message on stderr
and an exit status (`exit_with`).

Exit statuses: 1 for what used to end the run with its message alone (`KitError` itself), 2 for
input that cannot be read as a whole (`IntakeError`), 3 for a grader that is broken, not a
submission (`GraderFault`).
"""

from __future__ import annotations

import sys


class KitError(Exception):
    """Something the person running the kit must fix; the message says what."""

    exit_status = 1
    prefix = ""  # put before the message on stderr

    def shown(self) -> str:
        """The line(s) the entry point prints."""
        return f"{self.prefix}{self}"


class BuildError(KitError):
    """The notebooks or courses cannot be built (nbgrader failed, no short temporary folder)."""


class SourceError(BuildError):
    """The source, a part file or a check file is malformed or missing; the message says where."""


class ExportError(KitError):
    """The solutions cannot be printed (no browser, the browser failed)."""


class NoGradingCourse(KitError):
    """The grading course the autograder copies does not exist: `make notebooks` first."""


class UnreadableCsv(KitError):
    """A CSV the instructor saved is neither UTF-8 nor GBK."""


class BadOverrides(KitError):
    """overrides.csv cannot be applied; the message names the file and the line."""


class IntakeError(KitError):
    """The input cannot be read as a whole; the message says what to fix."""

    exit_status = 2
    prefix = "error: "


class WrongExport(IntakeError):
    """Most files of the input are not this assignment's notebooks of known students: the wrong
    export, most likely. Raised before anything is written into the report."""


class RosterError(IntakeError):
    """The roster cannot be used; the message says what to fix."""


class GraderFault(KitError):
    """The grader, not a submission, is broken: the message is for the instructor."""

    exit_status = 3
    prefix = "error: "


class Ungradable(KitError):
    """A submission that cannot be graded; .status is a short machine word, .reason says what to
    fix (English, one sentence): empty_file, invalid_json, not_a_notebook or wrong_assignment.
    It becomes that submission's row, never an exit status."""

    def __init__(self, status: str, reason: str):
        super().__init__(status, reason)  # both in .args, so it pickles across processes
        self.status = status
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.status}: {self.reason}"


def exit_with(error: KitError, stream=None) -> int:
    """Print `error` for the person at the terminal; the status the entry point exits with."""
    print(error.shown(), file=stream or sys.stderr)
    return error.exit_status


def run_command(run, argv=None) -> int:
    """An entry point's body: `run(argv)`'s exit status, or a kit error's message and status."""
    try:
        return run(argv)
    except KitError as error:
        return exit_with(error)
