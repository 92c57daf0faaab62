"""Grading: a batch of submissions graded by a pool of forked graders, each running nbgrader's
own autograde in its child process, behind the preflight gate and the fault stop."""
