"""Which parts count toward the score: `counted_parts` in grader/course.toml, read once into
`nbsource.PARTS`, and followed by the first cell, the part headings and the score's maximum."""

import pytest

from grader.kit.authoring.checkcells import total_points
from grader.kit.authoring.nbsource import (
    CHECKS_DIR,
    DEFAULT_COUNTED_PARTS,
    PARTS,
    load_parts,
    part_points,
    points_texts,
    read_source,
)
from grader.kit.report.grades import max_score

SOURCE = read_source()


def declared_points() -> dict[str, int]:
    """Each part's points as the check files declare them (`TOTAL_POINTS`), read without the build."""
    todos = {}
    for path in CHECKS_DIR.glob("[!_]*.py"):
        todos.update(total_points(path.name))
    return {part.key: sum(todos[t] for t in part.todos) for part in PARTS}


def course(tmp_path, line: str):
    path = tmp_path / "course.toml"
    path.write_text(f'github_repo = ""\n{line}\n', encoding="utf-8")
    return path


def test_by_default_every_part_but_the_optional_block_part_counts():
    assert (
        [p.key for p in PARTS if p.counted]
        == list(DEFAULT_COUNTED_PARTS)
        == ["core", "kv", "sched", "engine"]
    )


def test_the_grade_cells_give_each_part_the_points_its_check_files_declare():
    assert part_points(SOURCE) == declared_points()


def test_parts_one_and_two_weigh_their_todos_by_difficulty():
    """core 32 and kv 29 (docs/grading.md): the one-line TODOs weigh least, prefix matching and
    the KV cache most; every check is worth at least a point."""
    todos = {}
    for name in [f"todo{n}.py" for n in range(1, 11)]:
        todos.update(total_points(name))
    assert sum(todos[t] for t in range(1, 9)) == 32 and todos[9] + todos[10] == 29
    assert max(todos[1], todos[3], todos[6]) < min(todos[4], todos[7], todos[8])
    assert todos[10] > todos[9]


def test_an_instructor_who_counts_the_optional_part_gets_a_first_cell_and_headings_that_say_so(
    tmp_path,
):
    points = declared_points()
    parts = load_parts(course(tmp_path, 'counted_parts = ["core", "kv", "block", "sched", "engine"]'))
    texts = points_texts(SOURCE, parts)
    assert f"共 **{sum(points.values()):g} 分，计入成绩**" in texts["{{grading_summary}}"]
    assert "不计入" not in texts["{{grading_summary}}"]
    assert texts["{{points:block}}"] == f"{points['block']:g} 分，计分"


def test_leaving_part_four_out_of_the_score_records_it_separately(tmp_path):
    points = declared_points()
    parts = load_parts(course(tmp_path, 'counted_parts = ["core", "kv"]'))
    texts = points_texts(SOURCE, parts)
    assert f"共 **{points['core'] + points['kv']:g} 分，计入成绩**" in texts["{{grading_summary}}"]
    summary_others = texts["{{grading_summary}}"].split("；")[1]
    assert f"第四部分：调度器（TODO 15–19）{points['sched']:g} 分" in summary_others
    assert texts["{{points:sched}}"] == f"{points['sched']:g} 分，单独计分"


def test_the_default_setting_makes_the_score_the_sum_of_the_counted_parts():
    points = declared_points()
    assert max_score(_grade_points()) == sum(points[p.key] for p in PARTS if p.counted)


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


def test_the_readme_learner_table_states_each_parts_points_and_whether_it_counts():
    """The README's table of parts (one row a part, "TODO a–b" in the second column, "N，计入成绩"
    or "N，单独记录…" in the last) says what the source's grade cells and course.toml say."""
    from grader.kit.paths import REPO_ROOT

    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    rows = {}
    for line in readme.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1].startswith("TODO "):
            first = int(cells[1][5:].split("–")[0].split("：")[0])
            rows[first] = cells[2]
    points = part_points(SOURCE)
    for part in PARTS:
        said = rows.get(part.todos[0])
        assert said is not None, f"README's table has no row for TODO {part.todos[0]} ({part.key})"
        number = said.split("，")[0]
        assert float(number) == points[part.key], (part.key, said, points[part.key])
        assert said.split("，")[1].startswith("计入成绩" if part.counted else "单独记录"), (
            part.key,
            said,
        )
