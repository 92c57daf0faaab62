"""Read each notebook's path in an export as `layouts.read_name` does, a NAME_PATTERN first.

`ExportCollector(pattern).read(parts, source, gradescope)` is nbgrader's own file-name collector
(`FileNameCollectorPlugin`, whose `_match` applies the instructor's regex with its `student_id`,
optional `late` and `timestamp` groups), then Gradescope's metadata (`unpack.gradescope_ids`)
for a notebook in a `submission_<id>/` folder, then the LMS layouts of `layouts.py`. A bad
pattern raises IntakeError, whose message says what to fix.
"""

from __future__ import annotations

import logging
import re

from nbgrader.plugins.zipcollect import FileNameCollectorPlugin

from ..errors import IntakeError
from . import layouts


class ExportCollector(FileNameCollectorPlugin):
    """nbgrader's file-name collector, taught the LMS layouts of `layouts.py`.

    `read(parts, source, gradescope)` returns `layouts.read_name`'s dict for the notebook at
    `parts`: a user's `named_regexp` is tried first, through nbgrader's own `_match`.
    """

    def __init__(self, pattern: str | None = None, **kwargs):
        quiet = logging.getLogger("ch34.intake")
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False
        super().__init__(log=quiet, named_regexp=pattern or "", **kwargs)
        if pattern:
            try:
                groups = re.compile(pattern).groupindex
            except re.error as error:
                raise IntakeError(
                    f"NAME_PATTERN {pattern!r} is not a valid regular expression: {error}"
                ) from None
            if "student_id" not in groups:
                raise IntakeError(
                    f"NAME_PATTERN {pattern!r} has no (?P<student_id>...) group: add one around "
                    "the part of the file name that holds the student's id"
                )

    def is_notebook(self, parts: tuple[str, ...]) -> bool:
        return any(parts[-1].lower().endswith(ext.lower()) for ext in self.valid_ext)

    def collect(self, submitted_file: str) -> dict | None:
        """The reading of one path inside the export, or None for a file that is no notebook."""
        parts = tuple(submitted_file.split("/"))
        return self.read(parts, submitted_file) if self.is_notebook(parts) else None

    def read(self, parts: tuple[str, ...], source: str, gradescope=None) -> dict:
        name = parts[-1]
        if self.named_regexp:
            found = self._match(name) or self._match("/".join(parts))
            if found and found.get("student_id"):
                return {
                    **layouts.blank(found.get("file_id") or name),
                    **layouts.by_id(found["student_id"], "NAME_PATTERN", "NAME_PATTERN"),
                    "timestamp": found.get("timestamp"),
                    "late": bool(found.get("late")),
                }
        for prefix, submissions in (gradescope or {}).items():
            head = source[len(prefix) :].split("/")[0] if source.startswith(prefix) else ""
            if head.startswith("submission_"):
                return gradescope_reading(name, head, submissions)
        return layouts.read_name(parts)


def gradescope_reading(name: str, folder: str, submissions: dict) -> dict:
    """The reading of a notebook in Gradescope's `submission_<id>/` folder."""
    sids, when = submissions.get(folder, ([], None))
    reading = {**layouts.blank(name), "layout": "Gradescope", "timestamp": when}
    if len(sids) == 1 and sids[0]:
        return {**reading, **layouts.by_id(sids[0], "Gradescope", "submission_metadata.yml :sid:")}
    if len(sids) > 1:
        why = f"Gradescope's group submission {folder} of {', '.join(sids)}"
        return {**reading, "student_id": folder, "keyed": "team", "why": why}
    return {**reading, "why": f"{folder} has no :sid: in Gradescope's submission_metadata.yml"}
