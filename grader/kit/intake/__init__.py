"""Intake: what an LMS or a person hands the grader, read into one notebook per known student
(collection, names, the roster), every other file listed with why, and each notebook normalised
and scanned for cheating before it is graded."""
