"""The report of a grading run: scores, grades.csv, overrides, the LMS files, summary.html, the
feedback pages and the nbgrader course REPORT/nbgrader/."""
