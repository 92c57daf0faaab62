"""Today's LMS exports, built the way each LMS's own code names them, read without a kernel.

Every fixture below names its files with a function that follows the LMS's source:
  Moodle 4.x   mod/assign/classes/downloader.php (get_student_prefix, load_submissionplugin_filelist)
  Canvas       lib/content_zipper.rb (get_filename, sanitize_user_name, sanitize_file_name,
               add_upload_submission)
  nbgrader     nbgrader/exchange/default/submit.py (inbound/<student>+<assignment>+<timestamp>+
               <random>/ with timestamp.txt)
Blackboard's, Brightspace's and Gradescope's naming follow their downloads as nbgrader's
documentation and the LMSs' help pages show them.
"""

import csv
import re
import unicodedata
import zipfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grader.kit.errors import IntakeError
from grader.kit.intake.inventory import discover
from tests.conftest import NB, write

NOTEBOOK = "ch34_prefix_cache.ipynb"


def moodle_prefix(fullname: str, number: int, *, blind=False) -> str:
    """downloader.php get_student_prefix(): the name ('Participant' when blind), `_` made spaces."""
    name = "Participant" if blind else fullname
    return name.replace("_", " ") + f"_{number}"


def moodle_team_prefix(group: str | None, group_id: int | None = None) -> str:
    """get_student_prefix() for team submissions: "<group>_<id>", or "Default group"."""
    if group is None:
        return "Default group"
    return group.replace("_", " ") + f"_{group_id}"


def moodle_path(prefix: str, filename: str, *, folders=True) -> str:
    """load_submissionplugin_filelist(): 4.1+ folders "<prefix>_assignsubmission_file/<file>"."""
    if folders:
        return f"{prefix}_assignsubmission_file/{filename}"
    return f"{prefix}_assignsubmission_file_{filename}"


def canvas_file(sortable: str, user_id, attachment_id, display: str, *, late=False, anon=None):
    """content_zipper.rb: get_filename() + "_<attachment id>_<display name>"."""
    if anon is None:
        name = re.sub(r"_(\d+)_", r"\1", sortable)  # sanitize_user_name
        name = re.sub(r"^(\d+)$", r"\1", name).lower()
        parts = [name, "LATE" if late else None, str(user_id)]
    else:
        parts = ["LATE" if late else None, f"anon_{anon}"]
    filename = re.sub(r"[^\w]", "", "_".join(p for p in parts if p))  # sanitize_file_name
    display = re.sub(r'[\x00/\\:*?"<>|]+', "_", display)  # sanitize_attachment_filename
    return f"{filename}_{attachment_id}_{display}"


def roster(tmp_path, text):
    return write(tmp_path, "roster.csv", text)


def graded(intake):
    return {s.source: s.student_id for s in intake.submissions}


def unknown(intake):
    return {s.source: s.why for s in intake.unknown()}


def test_moodle_41_folders_and_flat_files_are_read_under_the_participant_number(tmp_path):
    export = tmp_path / "export"
    write(export, moodle_path(moodle_prefix("Wang Wu", 12347), NOTEBOOK))
    write(export, moodle_path(moodle_prefix("li_wei", 12350), NOTEBOOK, folders=False))
    with discover(export) as intake:
        assert graded(intake) == {
            "Wang Wu_12347_assignsubmission_file/ch34_prefix_cache.ipynb": "12347",
            "li wei_12350_assignsubmission_file_ch34_prefix_cache.ipynb": "12350",
        }
        assert "keyed by the LMS's user number" in intake.warnings()
    people = roster(tmp_path, "student_id,name,lms_user_id\n2023007,Wang Wu,12347\n")
    with discover(export, roster=people) as intake:
        assert graded(intake) == {
            "Wang Wu_12347_assignsubmission_file/ch34_prefix_cache.ipynb": "2023007"
        }
        # li wei is on no roster line: no id Moodle's importer would reject, no guess.
        assert (
            "not on the roster"
            in unknown(intake)["li wei_12350_assignsubmission_file_ch34_prefix_cache.ipynb"]
        )


def test_moodle_blind_marking_grades_each_participant_under_its_number(tmp_path):
    write(tmp_path, moodle_path(moodle_prefix("Wang Wu", 88, blind=True), NOTEBOOK))
    write(tmp_path, moodle_path(moodle_prefix("Li Si", 89, blind=True), "work/" + NOTEBOOK))
    with discover(tmp_path) as intake:
        assert sorted(graded(intake).values()) == ["Participant_88", "Participant_89"]
        assert {s.layout for s in intake.submissions} == {"Moodle (blind marking)"}


def test_moodle_team_submissions_are_graded_per_group_and_say_the_members_are_unknown(tmp_path):
    write(tmp_path, moodle_path(moodle_team_prefix("Team_A", 5), NOTEBOOK))
    write(tmp_path, moodle_path(moodle_team_prefix(None), NOTEBOOK))
    with discover(tmp_path) as intake:
        assert sorted(graded(intake).values()) == ["Default group", "group_5"]
        assert all("members are not in the export" in s.note for s in intake.submissions)
        assert "members are not in the export" in intake.table()


def test_canvas_anonymous_grading_is_read_and_late_carried(tmp_path):
    write(tmp_path, canvas_file("", None, 9001, NOTEBOOK, anon="aB3xY"))
    write(tmp_path, canvas_file("", None, 9002, NOTEBOOK, anon="Qz9k1", late=True))
    with discover(tmp_path) as intake:
        got = {s.student_id: s.late for s in intake.submissions}
    assert got == {"anon_aB3xY": False, "anon_Qz9k1": True}


def test_canvas_names_holding_underscores_are_confirmed_with_the_roster(tmp_path):
    # "wei_5" keeps its `_5` (only `_<digits>_` is collapsed): the first split reads user 5.
    name = canvas_file("wei_5", 123, 456, NOTEBOOK)
    plain = canvas_file("li_wei, zhang", 124, 457, NOTEBOOK, late=True)
    assert name == "wei_5_123_456_ch34_prefix_cache.ipynb"
    write(tmp_path / "export", name)
    write(tmp_path / "export", plain)
    with discover(tmp_path / "export") as intake:
        assert graded(intake)[plain] == "124" and intake.submissions[0].late is True
        assert "can also be read as '123'" in intake.warnings()
    people = roster(tmp_path, "student_id,name,lms_user_id\n2023001,Wei Wu,123\n2023002,L,124\n")
    with discover(tmp_path / "export", roster=people) as intake:
        assert graded(intake) == {name: "2023001", plain: "2023002"}


def test_blackboard_user_names_holding_underscores(tmp_path):
    name = "Ch 34 作业_li_wei5_attempt_2026-11-30-10-15-00_ch34_prefix_cache.ipynb"
    own = "ch34_prefix_cache_li_wei6_attempt_2026-11-30-10-15-00.ipynb"  # the assignment's name
    write(tmp_path / "export", name)
    write(tmp_path / "export", own)
    with discover(tmp_path / "export") as intake:
        assert graded(intake) == {name: "wei5", own: "li_wei6"}
        assert "can also be read as 'li_wei5'" in intake.warnings()
    people = roster(tmp_path, "student_id,name\nli_wei5,Li Wei\nli_wei6,Li Wei Six\n")
    with discover(tmp_path / "export", roster=people) as intake:
        assert graded(intake) == {name: "li_wei5", own: "li_wei6"}


@pytest.mark.parametrize(
    "header", ["学号,姓名,lms_user_id", "Student ID,Last Name,Username", "学号,姓名,用户名"]
)
def test_a_blackboard_user_name_the_roster_lists_is_matched_whole_before_the_name_is_split(
    tmp_path, header
):
    # The held-out export: Blackboard writes "<assignment>_<user name>_attempt_<time>", and
    # both may hold `_`. The roster's user name `li_wei5` is the whole tail of the name.
    name = "Ch 34 作业_li_wei5_attempt_2026-11-30-10-15-00_ch34_prefix_cache.ipynb"
    write(tmp_path / "export", name)
    people = roster(tmp_path, f"{header}\n2023001,李伟,li_wei5\n2023002,王五,wang_wu\n")
    with discover(tmp_path / "export", roster=people) as intake:
        assert graded(intake) == {name: "2023001"}, unknown(intake)
        assert "li_wei5" in intake.submissions[0].why


def test_a_user_name_holding_separators_is_found_whole_in_any_layout_that_would_split_it(tmp_path):
    # The assignment's name holds `_` too; the user name holds `-` and `.`; a plain file name
    # holds the user name among other words. Each is one roster student, matched whole.
    names = {
        "ch_34_hw_zhang-san.3_attempt_2026-11-30-10-15-00.ipynb": "2023003",
        "li_wei5_第34章.ipynb": "2023001",
    }
    for name in names:
        write(tmp_path / "export", name)
    people = roster(tmp_path, "学号,姓名,用户名\n2023001,李伟,li_wei5\n2023003,张三,zhang-san.3\n")
    with discover(tmp_path / "export", roster=people) as intake:
        assert graded(intake) == names, unknown(intake)


def test_a_blackboard_name_read_as_two_roster_students_is_tied_to_no_one(tmp_path):
    # `wei5` is one student's id and `li_wei5` another's user name: the file names either.
    name = "Ch 34 作业_li_wei5_attempt_2026-11-30-10-15-00.ipynb"
    write(tmp_path / "export", name)
    people = roster(tmp_path, "student_id,name,username\nwei5,Wei,\n2023001,Li Wei,li_wei5\n")
    with discover(tmp_path / "export", roster=people) as intake:
        assert graded(intake) == {}
        assert "several roster students (2023001, wei5)" in unknown(intake)[name]


def test_brightspace_folders_are_read_by_name_with_a_roster_and_refused_without(tmp_path):
    folder = "148-2093 - Zhang San - Nov 30, 2026 1015 AM"
    write(tmp_path / "export", f"{folder}/{NOTEBOOK}")
    with discover(tmp_path / "export") as intake:
        assert graded(intake) == {}
        assert (
            "Brightspace names the student only by display name"
            in unknown(intake)[f"{folder}/{NOTEBOOK}"]
        )
    people = roster(tmp_path, "student_id,name\n2023005,Zhang San\n")
    with discover(tmp_path / "export", roster=people) as intake:
        assert graded(intake) == {f"{folder}/{NOTEBOOK}": "2023005"}


def test_gradescope_exports_are_read_by_the_submitters_sid(tmp_path):
    export = tmp_path / "export"
    write(
        export,
        "submission_metadata.yml",
        ":submission_101:\n  :submitters:\n  - :name: Zhang San\n    :sid: '2023005'\n"
        "  :created_at: 2026-11-30 10:15:00.000000000 -08:00\n"
        "submission_102:\n  :submitters:\n  - :name: A\n    :sid: '1'\n  - :name: B\n"
        "    :sid: '2'\n",
    )
    write(export, f"submission_101/{NOTEBOOK}")
    write(export, f"submission_102/{NOTEBOOK}")
    write(export, f"submission_103/{NOTEBOOK}")
    with discover(export) as intake:
        assert graded(intake) == {
            f"submission_101/{NOTEBOOK}": "2023005",
            f"submission_102/{NOTEBOOK}": "submission_102",
        }
        assert "no :sid:" in unknown(intake)[f"submission_103/{NOTEBOOK}"]
        skipped = {s.source: s.why for s in intake.skipped}
    assert skipped["submission_metadata.yml"] == "Gradescope's list of submitters (read)"


def test_nbgrader_exchange_inbound_grades_the_newest_by_timestamp_txt(tmp_path):
    inbound = tmp_path / "exchange" / "ch34" / "inbound"
    older = "2023001+ch34_prefix_cache+2026-11-30 10:15:00.000000 UTC+abc"
    newer = "2023001+ch34_prefix_cache+2026-12-01 08:00:00.000000 UTC+def"
    # The folder's own time says the opposite: timestamp.txt decides.
    write(inbound, f"{newer}/{NOTEBOOK}", mtime=1_700_000_000)
    write(inbound, f"{newer}/timestamp.txt", "2026-12-01 08:00:00.000000 UTC")
    write(inbound, f"{older}/{NOTEBOOK}", mtime=1_800_000_000)
    write(inbound, f"{older}/timestamp.txt", "2026-11-30 10:15:00.000000 UTC")
    with discover(tmp_path / "exchange") as intake:
        assert [s.source.split("/")[2] for s in intake.submissions] == [newer]
        whys = {s.source: s.why for s in intake.skipped}
    stamps = [why for source, why in whys.items() if source.endswith("timestamp.txt")]
    assert len(stamps) == 2 and not any("not a notebook" in why for why in stamps)


CLASS = """\
student_id,name
2025001,张三
2025002,李四
2025003,王小明
2025004,王芳
2025005,王芳
"""


def test_a_chinese_classs_named_files_are_tied_to_the_roster(tmp_path):
    export = tmp_path / "export"
    for name in (
        "2025001_张三_第34章作业.ipynb",
        "李四-2025002-ch34.ipynb",
        "2025003王小明.ipynb",
        "王芳.ipynb",  # two students are called 王芳
        "2025001_李四.ipynb",  # names two students
    ):
        write(export, name)
    with discover(export, roster=roster(tmp_path, CLASS)) as intake:
        assert graded(intake) == {
            "2025001_张三_第34章作业.ipynb": "2025001",
            "李四-2025002-ch34.ipynb": "2025002",
            "2025003王小明.ipynb": "2025003",
        }
        whys = unknown(intake)
    assert "第 5 行（2025004，王芳）、第 6 行（2025005，王芳）" in whys["王芳.ipynb"]
    assert "<学号>_<姓名>.ipynb" in whys["王芳.ipynb"]  # what tells them apart: the id in the name
    assert "more than one roster student" in whys["2025001_李四.ipynb"]


def test_a_file_in_one_students_folder_named_after_another_is_tied_to_no_one(tmp_path):
    # A 学习通-style export, <学号>-<姓名>/<file>: 张三 handed in 李四's file, newer than 李四's own;
    # it was graded as 李四's (beating his own notebook) and 张三 was "missing".
    export = tmp_path / "export"
    write(export, "2025001-张三/2025002_李四_第34章.ipynb", mtime=1_780_000_100)
    write(export, "2025002-李四/2025002_李四_第34章.ipynb", mtime=1_780_000_000)
    write(export, "2025003-王小明/2025003_王小明 (1).ipynb", mtime=1_780_000_000)
    with discover(export, roster=roster(tmp_path, CLASS)) as intake:
        assert graded(intake) == {
            "2025002-李四/2025002_李四_第34章.ipynb": "2025002",
            "2025003-王小明/2025003_王小明 (1).ipynb": "2025003",
        }
        why = unknown(intake)["2025001-张三/2025002_李四_第34章.ipynb"]
    assert "第 3 行（2025002，李四）" in why and "第 2 行（2025001，张三）" in why


def test_one_file_name_in_every_students_folder_is_read_by_the_folder(tmp_path):
    # Without a roster the file's name was each student's id: two students, one id, one graded.
    export = tmp_path / "export"
    for folder in ("张三", "李四"):
        write(export, f"{folder}/第34章_前缀缓存.ipynb")
    write(export, "作业收集/第34章_前缀缓存.ipynb")  # a class's shared folder names no one
    with discover(export) as intake:
        assert graded(intake) == {
            "张三/第34章_前缀缓存.ipynb": "张三",
            "李四/第34章_前缀缓存.ipynb": "李四",
        }
        assert list(unknown(intake)) == ["作业收集/第34章_前缀缓存.ipynb"]


def test_one_students_file_in_two_rounds_folders_stays_his(tmp_path):
    # Not a name every student's folder holds: an id in the name, and folders of several files.
    export = tmp_path / "export"
    write(export, "第一次提交/2025001.ipynb", mtime=1_780_000_000)
    write(export, "第二次提交/2025001.ipynb", mtime=1_780_000_100)
    for name in ("张三", "李四"):
        write(export, f"第一次/{name}.ipynb", mtime=1_780_000_000)
        write(export, f"第二次/{name}.ipynb", mtime=1_780_000_100)
    with discover(export) as intake:
        assert graded(intake) == {
            "第二次提交/2025001.ipynb": "2025001",
            "第二次/张三.ipynb": "张三",
            "第二次/李四.ipynb": "李四",
        }


def test_a_short_roster_id_is_not_found_in_a_chapter_number_nor_a_name_in_a_longer_one(tmp_path):
    # Ids 1..40 of a small class: 第34章作业 was graded as student 34's. 张三 inside 张三丰 made
    # 35_张三丰 "name more than one roster student", and 王伟东 "a name two students share".
    export = tmp_path / "export"
    for name in ("第34章作业.ipynb", "35_张三丰.ipynb", "王伟东.ipynb", "王伟.ipynb"):
        write(export, name)
    class_ = "student_id,name\n1,张三\n34,王五\n35,张三丰\n36,王伟\n37,王伟东\n"
    with discover(export, roster=roster(tmp_path, class_)) as intake:
        assert graded(intake) == {"35_张三丰.ipynb": "35", "王伟东.ipynb": "37", "王伟.ipynb": "36"}
        assert list(unknown(intake)) == ["第34章作业.ipynb"]


def test_an_id_in_full_width_digits_and_a_name_macos_decomposed_are_found_on_the_roster(tmp_path):
    # A Chinese IME in full-width mode types ２０２５００１; macOS's Archive Utility stores é as
    # e + U+0301. Both were "not on the roster".
    export = tmp_path / "export"
    write(export, "２０２５００２_ch34.ipynb")
    write(export, unicodedata.normalize("NFD", "José Müller.ipynb"))
    class_ = "student_id,name\n2025002,李四\n2025003,José Müller\n"
    with discover(export, roster=roster(tmp_path, class_)) as intake:
        assert sorted(graded(intake).values()) == ["2025002", "2025003"]


def test_two_students_named_alike_in_a_moodle_export_are_told_apart_by_the_participant_number(
    tmp_path,
):
    """Issue 40: a Moodle export with two 王伟 and the school's GBK roster (学号,姓名,班级,邮箱)."""
    export = tmp_path / "export"
    for number in (30101, 30102):
        write(export, moodle_path(moodle_prefix("王伟", number), NOTEBOOK))
    school = (
        "学号,姓名,班级,邮箱\n2025011,王伟,计科1班,ww11@x.edu\n2025012,王伟,计科2班,ww12@x.edu\n"
    )
    (tmp_path / "roster.csv").write_bytes(school.encode("gbk"))
    with discover(export, roster=tmp_path / "roster.csv") as intake:
        assert graded(intake) == {}
        whys = unknown(intake)
    why = whys[f"王伟_30101_assignsubmission_file/{NOTEBOOK}"]
    assert "第 2 行（2025011，王伟，ww11@x.edu）、第 3 行（2025012，王伟，ww12@x.edu）" in why
    assert "Moodle 的参与者编号" in why and "30101" in why and "lms_user_id" in why
    # What the message says to do: the participant number as a roster column.
    numbered = "学号,姓名,班级,邮箱,Participant number\n2025011,王伟,计科1班,ww11@x.edu,30102\n"
    numbered += "2025012,王伟,计科2班,ww12@x.edu,30101\n"
    (tmp_path / "roster.csv").write_bytes(numbered.encode("gbk"))
    with discover(export, roster=tmp_path / "roster.csv") as intake:
        assert graded(intake) == {
            f"王伟_30101_assignsubmission_file/{NOTEBOOK}": "2025012",
            f"王伟_30102_assignsubmission_file/{NOTEBOOK}": "2025011",
        }


def test_a_students_newer_final_notebook_beats_his_older_draft_named_like_the_assignment(tmp_path):
    """Issue 40: the draft `ch34_prefix_cache.ipynb` (older) and `…_final.ipynb` (newer) in
    one Moodle submission: the newer is graded, and the choice is said in Chinese with how to
    grade the other (choices.csv, written ready to edit)."""
    folder = moodle_prefix("王伟", 30101) + "_assignsubmission_file"
    write(tmp_path / "export", f"{folder}/{NOTEBOOK}", mtime=1_780_000_000)
    write(tmp_path / "export", f"{folder}/ch34_prefix_cache_final.ipynb", mtime=1_780_090_000)
    roster_csv = roster(tmp_path, "学号,姓名,lms_user_id\n2025011,王伟,30101\n")
    with discover(tmp_path / "export", roster=roster_csv) as intake:
        [chosen] = intake.submissions
        intake.write_csv(tmp_path / "report" / "intake.csv")
        warnings = intake.warnings()
    assert chosen.source == f"{folder}/ch34_prefix_cache_final.ipynb"
    assert chosen.choice == "最新的那个（按文件时间）"
    assert f"2025011: 交了 2 个 notebook，评 {chosen.source}：最新的那个" in warnings
    assert "CHOICES=REPORT/choices.csv" in warnings
    with open(tmp_path / "report" / "choices.csv", newline="", encoding="utf-8-sig") as handle:
        [row] = list(csv.DictReader(handle))
    assert (row["学号"], row["姓名"], row["文件"]) == ("2025011", "王伟", chosen.source)
    assert f"{folder}/{NOTEBOOK}（文件时间 " in row["可选的文件（时间）"]
    # The instructor grades the draft instead: its name alone is enough, and the choice is said.
    choices = write(tmp_path, "choices.csv", f"学号,文件\n2025011,{NOTEBOOK}\n")
    with discover(tmp_path / "export", roster=roster_csv, choices=choices) as intake:
        [chosen] = intake.submissions
    assert chosen.source == f"{folder}/{NOTEBOOK}"
    assert chosen.choice.startswith(f"老师在 {choices} 第 2 行")


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("2025011,draft.ipynb", "2025011 没有叫这个名字的 notebook；他的 notebook："),
        ("2025099,ch34_prefix_cache.ipynb", "这份导出里没有学号 2025099 的 notebook"),
        ("2025011", "both 学号 and 文件 are needed"),
    ],
)
def test_a_choice_that_names_no_notebook_of_the_student_says_what_to_fix(tmp_path, line, says):
    write(tmp_path / "export", "2025011/ch34_prefix_cache.ipynb")
    write(tmp_path / "export", "2025011/ch34_prefix_cache_final.ipynb")
    choices = tmp_path / "choices.csv"
    choices.write_bytes(f"学号,文件\n{line}\n".encode("gbk"))  # as Excel saves it in China
    with pytest.raises(IntakeError, match=re.escape(says)):
        discover(tmp_path / "export", choices=choices).close()


def test_two_notebooks_from_one_student_grade_the_one_named_like_the_assignment(tmp_path):
    same = 1_780_000_000
    good = canvas_file("li, si", 123457, 1, "ch34_prefix_cache.ipynb")
    draft = canvas_file("li, si", 123457, 2, "ch34_prefix_cache_draft.ipynb")
    write(tmp_path, good, mtime=same)
    write(tmp_path, draft, mtime=same)  # sorts last: name order must not decide
    with discover(tmp_path) as intake:
        [chosen] = intake.submissions
        assert chosen.source == good and chosen.superseded == [draft]
        assert chosen.choice == "与作业 notebook 同名的那个（文件时间相同）"
        rows = {row[0]: row for row in intake.rows()}
        assert (
            f"123457: 交了 2 个 notebook，评 {good}：与作业 notebook 同名的那个"
            in intake.warnings()
        )
    assert "123457 的另一个 notebook" in rows[draft][3] and rows[draft][2] == "not graded"
    assert draft in rows[good][3], "intake.csv names the files not graded"


@pytest.mark.parametrize("newest", ["a_final.ipynb", "z_final.ipynb"])
def test_two_notebooks_neither_named_like_the_assignment_grade_the_newest(tmp_path, newest):
    sources = {}
    for index, name in enumerate(("a_final.ipynb", "z_final.ipynb")):
        sources[name] = canvas_file("li, si", 7, index, name)
        write(tmp_path, sources[name], mtime=1_780_000_000 + (60 if name == newest else 0))
    with discover(tmp_path) as intake:
        [chosen] = intake.submissions
    assert chosen.source == sources[newest] and chosen.choice == "最新的那个（按文件时间）"


def test_two_notebooks_of_one_student_at_the_same_time_are_neither_graded(tmp_path):
    same = 1_780_000_000
    write(tmp_path, canvas_file("li, si", 7, 1, "part1.ipynb"), mtime=same)
    write(tmp_path, canvas_file("li, si", 7, 2, "part2.ipynb"), mtime=same)
    with discover(tmp_path) as intake:
        assert intake.submissions == []
        assert all("都没有评分" in s.why and "choices.csv" in s.why for s in intake.skipped)


def test_generic_names_of_different_students_are_never_merged(tmp_path):
    export = tmp_path / "export"
    write(export, "ch34 作业.ipynb")
    with zipfile.ZipFile(export / "class.zip", "w") as zipped:
        zipped.writestr("ch34 作业.ipynb", NB)
    # A Google Form's upload folder on Drive: two students' files of one name, " (1)" added.
    write(export, "Ch34 作业 (File responses)/ch34_prefix_cache.ipynb")
    write(export, "Ch34 作业 (File responses)/ch34_prefix_cache (1).ipynb")
    with discover(export) as intake:
        assert intake.submissions == []
        assert len(intake.unknown()) == 4
        assert not any("another notebook" in s.why for s in intake.skipped)
        assert all(s.source in intake.table() for s in intake.unknown())


# The never-merge property, on generated classes: each student hands in one notebook, in one of
# the layouts an export uses; however the names fall, no graded id holds two students' files.
LAYOUTS = ["moodle", "canvas", "folder", "plain", "chinese", "generic", "own-folder"]
names = st.text(alphabet="abcdefgh张李王_ ", min_size=1, max_size=6).map(str.strip)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    people=st.lists(st.tuples(names, st.sampled_from(LAYOUTS)), min_size=2, max_size=8),
    with_roster=st.booleans(),
)
def test_no_two_students_are_ever_merged(tmp_path_factory, people, with_roster):
    export = tmp_path_factory.mktemp("class")
    owner, lines = {}, ["student_id,name,lms_user_id"]
    for index, (name, layout) in enumerate(people):
        sid, number = f"20250{index:02d}", 7000 + index
        lines.append(f"{sid},{name},{number}")
        source = {
            "moodle": moodle_path(moodle_prefix(name or "x", number), NOTEBOOK),
            "canvas": canvas_file(name or "x", number, 100 + index, NOTEBOOK),
            "folder": f"{sid}/{NOTEBOOK}",
            "plain": f"{sid}.ipynb",
            "chinese": f"{sid}_{name}_第34章作业.ipynb",
            "generic": f"d{index}/ch34 作业.ipynb",
            "own-folder": f"{sid}-{name}/第34章_前缀缓存.ipynb",  # one file name in every folder
        }[layout]
        write(export, source, mtime=1_780_000_000)
        owner[source] = sid
    people_csv = roster(export, "\n".join(lines) + "\n") if with_roster else None
    with discover(export, roster=people_csv) as intake:
        for s in intake.submissions:
            students = {owner[f] for f in [s.source, *s.superseded] if f in owner}
            assert len(students) == 1, (s.student_id, s.source, s.superseded)
            if with_roster:
                assert s.student_id == owner[s.source]
        ids = [s.student_id for s in intake.submissions]
        assert len(ids) == len(set(ids))


def test_a_text_only_submission_is_tied_to_its_student_and_not_graded(tmp_path):
    # Moodle: the online text plugin's folder (downloader.php, type 'onlinetext'); Canvas:
    # add_text_or_url() names a text entry "<get_filename()>_text.html".
    moodle = moodle_prefix("Wang Wu", 12347) + "_assignsubmission_onlinetext/onlinetext.html"
    canvas = re.sub(r"_1_x$", "", canvas_file("li, si", 123457, 1, "x")) + "_text.html"
    assert canvas == "lisi_123457_text.html"
    write(tmp_path, moodle, "<p>见附件</p>")
    write(tmp_path, canvas, "<p>hi</p>")
    with discover(tmp_path) as intake:
        owners = {s.source: (s.student_id, s.why) for s in intake.skipped}
    assert owners[moodle][0] == "12347" and "nothing to grade" in owners[moodle][1]
    assert owners[canvas][0] == "123457" and owners[canvas][1].startswith("not a notebook (.html)")


def test_an_lms_number_in_a_folder_name_is_never_read_as_a_student_id(tmp_path):
    # Student 12347's roster line has no lms_user_id, and the Moodle name is not on the roster:
    # participant 12347 is someone the roster cannot tell, not student 12347.
    write(tmp_path / "export", moodle_path(moodle_prefix("Nobody Known", 12347), NOTEBOOK))
    people = roster(tmp_path, "student_id,name\n12347,Someone Else\n")
    with discover(tmp_path / "export", roster=people) as intake:
        assert intake.submissions == [] and len(intake.unknown()) == 1
