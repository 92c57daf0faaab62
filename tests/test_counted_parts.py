"""Which parts count toward the score: `counted_parts` in grader/course.toml, read once into
`nbsource.PARTS`, and followed by the first cell, the part headings and the score's maximum."""

import pytest

from grader.kit.authoring.nbsource import (
    DEFAULT_COUNTED_PARTS,
    PARTS,
    load_parts,
    part_points,
    points_texts,
    read_source,
)
from grader.kit.report.grades import max_score

SOURCE = read_source()


def course(tmp_path, line: str):
    path = tmp_path / "course.toml"
    path.write_text(f'github_repo = ""\n{line}\n', encoding="utf-8")
    return path


def test_by_default_parts_one_two_and_four_count_and_part_three_is_recorded_beside_them():
    assert (
        [p.key for p in PARTS if p.counted]
        == list(DEFAULT_COUNTED_PARTS)
        == ["core", "kv", "sched"]
    )
    assert part_points(SOURCE) == {"core": 100, "kv": 30, "block": 50, "sched": 50, "engine": 30}


def test_an_instructor_who_counts_the_challenge_part_gets_a_first_cell_and_headings_that_say_so(
    tmp_path,
):
    parts = load_parts(course(tmp_path, 'counted_parts = ["core", "kv", "block", "sched", "engine"]'))
    texts = points_texts(SOURCE, parts)
    assert "共 **260 分，计入成绩**" in texts["{{grading_summary}}"]
    assert "不计入" not in texts["{{grading_summary}}"]
    assert texts["{{points:block}}"] == "50 分，计分"


def test_leaving_part_four_out_of_the_score_records_it_separately(tmp_path):
    parts = load_parts(course(tmp_path, 'counted_parts = ["core", "kv"]'))
    texts = points_texts(SOURCE, parts)
    assert "共 **130 分，计入成绩**" in texts["{{grading_summary}}"]
    assert "第四部分：调度器（TODO 15–19）50 分" in texts["{{grading_summary}}"].split("；")[1]
    assert texts["{{points:sched}}"] == "50 分，单独计分"


def test_the_default_setting_makes_the_score_out_of_180():
    assert max_score(_grade_points()) == 180


def _grade_points():
    from grader.kit.authoring.nbsource import nbgrader_meta

    return [
        (nbgrader_meta(c)["grade_id"], nbgrader_meta(c)["points"])
        for c in SOURCE.cells
        if nbgrader_meta(c).get("grade")
    ]


@pytest.mark.parametrize(
    "line, words",
    [
        ('counted_parts = ["core", "scheduler"]', "names ['scheduler']"),
        ('counted_parts = "core"', "must be a list"),
        ("counted_parts = [1, 2]", "must be a list"),
    ],
)
def test_a_bad_setting_is_an_error_that_names_the_file_and_the_parts(tmp_path, line, words):
    with pytest.raises(ValueError, match="course.toml") as error:
        load_parts(course(tmp_path, line))
    assert words in str(error.value) and "sched" in str(error.value)
