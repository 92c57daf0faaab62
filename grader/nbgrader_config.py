"""nbgrader configuration of the chapter-34 course (copied into every course directory the kit builds)."""

c = get_config()  # noqa: F821 (injected by nbgrader)

c.CourseDirectory.course_id = "ch34"
c.CourseDirectory.db_assignments = [{"name": "ch34_prefix_cache"}]

# The release keeps nbgrader's usual stub, so every TODO raises NotImplementedError.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# Execution limits for one submission (the kit adds a wall-clock limit per notebook).
c.Execute.timeout = 60
c.Execute.interrupt_on_timeout = True
c.LimitOutput.max_lines = 200
c.LimitOutput.max_traceback = 60

# The kit writes its own feedback pages (grader/kit/feedback.py). For an instructor who runs
# nbgrader's `generate_feedback` on a course anyway: it must never show hidden tests (its default does).
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbgrader.preprocessors.ClearHiddenTests",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
