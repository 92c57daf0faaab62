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

# The kit writes its own feedback pages (grader/kit/report/feedback.py). For an instructor who runs
# nbgrader's `generate_feedback` (or formgrader's feedback button) on a course anyway: it must never
# show hidden tests. ClearHiddenTests removes them from the cells' source, but nbgrader's default
# list leaves it out, and it cannot reach the outputs: a failed grade cell's traceback quotes the
# hidden lines around the failing assert (the reference oracle included). StripGradeTracebacks
# keeps only `ErrorName: message` of a grade cell's error. This holds only when nbgrader reads this
# file: run `nbgrader generate_feedback` from the course folder that holds it.
from nbconvert.preprocessors import Preprocessor  # noqa: E402
from traitlets import Bool  # noqa: E402


class StripGradeTracebacks(Preprocessor):
    """Reduce every grade cell's error output to its last line: no quoted test source."""

    enabled = Bool(True)  # nbconvert's preprocessors are off unless enabled

    def preprocess_cell(self, cell, resources, index):
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    output["traceback"] = [f"{output.get('ename', '')}: {output.get('evalue', '')}"]
        return cell, resources


c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbgrader.preprocessors.ClearHiddenTests",
    StripGradeTracebacks,
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
