"""The grade of one submission, as it goes into grades.csv, the feedback page and the gradebook."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Outcome:
    """The grade of one submission. `student_id` is always the learner's id, never nbgrader's
    internal one (`workcopy.internal_id`)."""

    student_id: str
    status: str
    reason: str = ""
    scores: dict = field(default_factory=dict)  # grade_id -> (score, max_score)
    repairs: list = field(default_factory=list)
    seconds: float = 0.0
    autograded: str = ""  # nbgrader's autograded notebook, while it is still in the working copy
    late: bool = False  # the export marks the submission late (Canvas's LATE, a NAME_PATTERN)
    source: str = ""  # the input file as named in the export
    superseded: list = field(default_factory=list)  # the student's other notebooks, not graded
    choice: str = ""  # with several notebooks: the rule that chose the one graded
    faults: list = field(default_factory=list)  # where the kernel ended and was restarted

    @classmethod
    def of(cls, submission, status: str, reason: str = "", **fields) -> Outcome:
        """The outcome of `submission` (an `intake.inventory.Submission`): its id and files."""
        return cls(
            submission.student_id,
            status,
            reason,
            late=submission.late,
            source=submission.source,
            superseded=list(submission.superseded),
            choice=submission.choice,
            **fields,
        )
