"""A learner's fault while grading, from the kernel's end to the line a person reads.

`kinds` tells why a kernel ended in the middle of a cell (exit status, memory cgroup, timeout,
the time box's last resort); `resume` is nbgrader's executor made to survive it (a fresh kernel,
the cells the rest needs re-run, the next cell); `causes` finds answer cells that did not run
(a `SyntaxError`, an error at definition); `boxes` finds TODOs whose checks ran out of their
time boxes (a loop the kernel survived); `lines` is what the console and summary.html say of
them all. The grader (`grading/child.py`) and the report (`report/feedback.py`, `summary.py`) use them.
"""
