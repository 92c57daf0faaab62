"""Intake: every file of an LMS export, zip or folder ends graded, ungradable, or listed with why.

The name parsing and the bookkeeping are tested on files without kernels; one real batch
(nbgrader, kernels, bubblewrap) proves ids, late flags and odd names end right in grades.csv.
"""

import csv
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from grader.kit.authoring.examples import filled_submission
from grader.kit.authoring.nbsource import NOTEBOOK_NAME, REPO_ROOT
from grader.kit.intake.inventory import ExportCollector, IntakeError, discover
from grader.kit.intake.layouts import copy_number
from grader.kit.intake.roster import Roster
from grader.kit.paths import page_name
from tests.conftest import NB, autograde, read_nb, write

ROSTER = """\
student_id,name,lms_user_id,email
2023001,赵一,,zhaoyi@example.edu
2023002,Li Si,123457,lisi@example.edu
2023003,Sun San,,
2023004,周四,,
2023005,张三,12345,
2023006,Zhang San,123456,
2023007,Wang Wu,12347,
2023010,Chen Shi,,
Wang Wu [final],,,
a*b?,,,
"""


def make_zip(path, members: dict):
    """A zip of `members` (name: text), every member with one time: the newest is never a
    matter of which second the test wrote it in."""
    with zipfile.ZipFile(path, "w") as zipped:
        for name, text in members.items():
            zipped.writestr(zipfile.ZipInfo(name, date_time=(2026, 12, 1, 8, 0, 0)), text)
    return path


def found(intake):
    """{source: (student_id, late)} of the submissions, {source: why} of the rest."""
    graded = {s.source: (s.student_id, s.late) for s in intake.submissions}
    return graded, {s.source: s.why for s in intake.skipped}


@pytest.mark.parametrize(
    "name, student_id, late, layout",
    [
        ("Wang Wu_12347_assignsubmission_file_/ch34_prefix_cache.ipynb", "12347", False, "Moodle"),
        ("Zhang San_12345_assignsubmission_file_ch34_prefix_cache.ipynb", "12345", False, "Moodle"),
        (
            "Participant_88_assignsubmission_file_/x/ch34_prefix_cache.ipynb",
            "Participant_88",
            False,
            "Moodle (blind marking)",
        ),
        ("lisi_LATE_123457_7890124_ch34_prefix_cache.ipynb", "123457", True, "Canvas"),
        ("lisi_LATE_123457_7890124_work/ch34_prefix_cache.ipynb", "123457", True, "Canvas"),
        ("Wang Wu_12347_assignsubmission_file_/work/2023001.ipynb", "12347", False, "Moodle"),
        ("zhangsan_123456_7890123_ch34_prefix_cache-1.ipynb", "123456", False, "Canvas"),
        (
            "ch34_prefix_cache_2023001_attempt_2026-11-30-10-15-00_ch34_prefix_cache.ipynb",
            "2023001",
            False,
            "Blackboard",
        ),
        ("Ch 34_2023001_attempt_2026-11-30-10-15-00.ipynb", "2023001", False, "Blackboard"),
        (
            "submitted/2023009/ch34_prefix_cache/ch34_prefix_cache.ipynb",
            "2023009",
            False,
            "nbgrader",
        ),
        ("course/submitted/a b/ch34_prefix_cache/other.ipynb", "a b", False, "nbgrader"),
        ("2023008/ch34_prefix_cache.ipynb", "2023008", False, "per-student folder"),
        ("2023008/Copy of ch34_prefix_cache (2).ipynb", "2023008", False, "per-student folder"),
        ("2023004.IPYNB", "2023004", False, "plain"),
        ("2023003 (1).ipynb", "2023003", False, "plain"),
        ("2023003 - 副本.ipynb", "2023003", False, "plain"),
        ("Wang Wu [final].ipynb", "Wang Wu [final]", False, "plain"),
        ("a*b?.ipynb", "a*b?", False, "plain"),
        ("张三.ipynb", "张三", False, "plain"),
    ],
)
def test_builtin_patterns_name_the_student_of_each_layout(name, student_id, late, layout):
    info = ExportCollector().collect(name)
    assert (info["student_id"], info["late"], info["layout"]) == (student_id, late, layout)


def test_a_file_that_is_no_notebook_is_not_collected():
    assert ExportCollector().collect("Wang Wu_12347_assignsubmission_file_/report.pdf") is None
    assert ExportCollector().collect("notes.ipynb.txt") is None


def test_name_pattern_comes_first_and_carries_late_and_timestamp():
    collector = ExportCollector(
        r"hw-(?P<student_id>\d+)(?P<late>-late)?-(?P<timestamp>\d{4}-\d\d-\d\d)"
    )
    info = collector.collect("hw-2023011-late-2026-11-30.ipynb")
    assert (info["student_id"], info["late"], info["layout"]) == ("2023011", True, "NAME_PATTERN")
    assert info["timestamp"] == "2026-11-30"
    # A file the pattern does not fit falls back to the built-in rules.
    assert collector.collect("2023004.ipynb")["student_id"] == "2023004"


def test_copy_suffixes_order_the_copies():
    assert copy_number("2023003") == ("2023003", 0)
    assert copy_number("2023003 (1)") == ("2023003", 1)
    assert copy_number("2023003 (12)") == ("2023003", 12)
    assert copy_number("2023003 - Copy") == ("2023003", 1)
    assert copy_number("Wang Wu [final]") == ("Wang Wu [final]", 0)


def test_roster_maps_lms_numbers_names_and_logins_to_student_ids(tmp_path):
    roster = write(tmp_path, "roster.csv", ROSTER)
    export = tmp_path / "export"
    write(export, "Wang Wu_12347_assignsubmission_file_/ch34_prefix_cache.ipynb")
    write(export, "Zhang San_12345_assignsubmission_file_ch34_prefix_cache.ipynb")
    write(export, "lisi_LATE_123457_7890124_ch34_prefix_cache.ipynb")
    write(export, "zhangsan_999_7890123_ch34_prefix_cache.ipynb")  # login only: by name
    write(export, "周四.ipynb")  # a name in a plain file name
    write(export, "zhaoyi.ipynb")  # an email's local part
    write(export, "Unknown Person.ipynb")
    with discover(export, roster=roster) as intake:
        graded, skipped = found(intake)
        notes = {s.student_id: s.note for s in intake.submissions}
    assert graded == {
        "Wang Wu_12347_assignsubmission_file_/ch34_prefix_cache.ipynb": ("2023007", False),
        "Zhang San_12345_assignsubmission_file_ch34_prefix_cache.ipynb": ("2023005", False),
        "lisi_LATE_123457_7890124_ch34_prefix_cache.ipynb": ("2023002", True),
        "zhangsan_999_7890123_ch34_prefix_cache.ipynb": ("2023006", False),
        "周四.ipynb": ("2023004", False),
        "zhaoyi.ipynb": ("2023001", False),
    }
    # With a roster, a file of no roster student is graded under no one: never a guess.
    assert list(skipped) == ["Unknown Person.ipynb"]
    assert "not on the roster" in skipped["Unknown Person.ipynb"]
    assert all(note == "" for note in notes.values())


def test_without_a_roster_lms_files_are_keyed_by_the_lms_number(tmp_path):
    write(tmp_path, "Wang Wu_12347_assignsubmission_file_/ch34_prefix_cache.ipynb")
    write(tmp_path, "lisi_LATE_123457_7890124_ch34_prefix_cache.ipynb")
    with discover(tmp_path) as intake:
        assert sorted(s.student_id for s in intake.submissions) == ["123457", "12347"]
        assert "2 Moodle/Canvas file(s) are keyed by the LMS's user number" in intake.warnings()


def test_an_lms_number_is_never_read_as_another_students_id(tmp_path):
    roster = write(tmp_path, "roster.csv", "student_id,name\n12347,Someone Else\n2023007,Wang Wu\n")
    write(tmp_path, "export/Wang Wu_12347_assignsubmission_file_/ch34_prefix_cache.ipynb")
    with discover(tmp_path / "export", roster=roster) as intake:
        assert [s.student_id for s in intake.submissions] == ["2023007"]
        assert intake.warnings() == ""


def test_debris_and_other_files_are_listed_with_why(tmp_path):
    write(tmp_path, "2023001.ipynb")
    write(tmp_path, "._2023001.ipynb")
    write(tmp_path, "__MACOSX/._2023001.ipynb")
    write(tmp_path, ".ipynb_checkpoints/2023001-checkpoint.ipynb")
    write(tmp_path, ".DS_Store")
    write(tmp_path, "sub/Thumbs.db")
    write(tmp_path, "readme.pdf")
    write(tmp_path, "Ch 34_2023010_attempt_2026-11-30-10-15-00.txt")
    with discover(tmp_path) as intake:
        graded, skipped = found(intake)
        debris = {s.source for s in intake.skipped if s.debris}
        printed = intake.not_graded()
    assert graded == {"2023001.ipynb": ("2023001", False)}
    assert debris == {
        "._2023001.ipynb",
        "__MACOSX/._2023001.ipynb",
        ".ipynb_checkpoints/2023001-checkpoint.ipynb",
        ".DS_Store",
        "sub/Thumbs.db",
    }
    assert skipped["readme.pdf"] == "not a notebook (.pdf)"
    assert skipped["Ch 34_2023010_attempt_2026-11-30-10-15-00.txt"] == (
        "Blackboard's submission receipt"
    )
    assert printed.startswith("not graded: 7 file(s):")
    assert all(source in printed for source in skipped)


def test_newest_duplicate_is_graded_and_the_older_recorded(tmp_path):
    same = 1_780_000_000
    write(tmp_path, "a/2023003.ipynb", mtime=same)
    write(tmp_path, "a/2023003 (1).ipynb", mtime=same)  # same time: the copy suffix decides
    write(tmp_path, "b/2023004 (1).ipynb", mtime=same)
    write(tmp_path, "b/2023004.ipynb", mtime=same + 60)  # the newer file wins over the suffix
    write(tmp_path, "c/Ch 34_2023010_attempt_2026-11-30-10-15-00.ipynb", mtime=same + 60)
    write(tmp_path, "c/Ch 34_2023010_attempt_2026-12-01-08-00-00.ipynb", mtime=same)  # by name
    with discover(tmp_path) as intake:
        kept = {s.student_id: (s.source, s.superseded) for s in intake.submissions}
        _, skipped = found(intake)
    assert kept == {
        "2023003": ("a/2023003 (1).ipynb", ["a/2023003.ipynb"]),
        "2023004": ("b/2023004.ipynb", ["b/2023004 (1).ipynb"]),
        "2023010": (
            "c/Ch 34_2023010_attempt_2026-12-01-08-00-00.ipynb",
            ["c/Ch 34_2023010_attempt_2026-11-30-10-15-00.ipynb"],
        ),
    }
    assert skipped["a/2023003.ipynb"] == (
        "2023003 的另一个 notebook，没有评分：评的是 a/2023003 (1).ipynb，"
        "副本编号最大的那个（文件时间相同；“x (1)” 晚于 “x”）"
    )


def test_zips_are_read_also_inside_a_folder_and_removed_afterwards(tmp_path):
    export = tmp_path / "export"
    export.mkdir()
    make_zip(
        export / "moodle.zip",
        {
            "Wang Wu_12347_assignsubmission_file_/ch34_prefix_cache.ipynb": NB,
            "__MACOSX/Wang Wu_12347_assignsubmission_file_/._ch34_prefix_cache.ipynb": "x",
        },
    )
    make_zip(export / "2023008.zip", {"2023008/ch34_prefix_cache.ipynb": NB})  # a student's zip
    make_zip(export / "empty.zip", {"notes.txt": "hello"})
    (export / "broken.zip").write_bytes(b"PK\x03\x04 not really a zip")
    with discover(export) as intake:
        graded, skipped = found(intake)
        scratch = intake.scratch
        assert all(s.path.is_file() for s in intake.submissions)
    assert not scratch.exists()
    assert graded == {
        "moodle.zip/Wang Wu_12347_assignsubmission_file_/ch34_prefix_cache.ipynb": ("12347", False),
        "2023008.zip/2023008/ch34_prefix_cache.ipynb": ("2023008", False),
    }
    assert skipped["empty.zip"] == "a zip with no notebook inside"
    assert skipped["empty.zip/notes.txt"] == "not a notebook (.txt)"
    assert skipped["broken.zip"].startswith("a damaged zip")
    assert "moodle.zip/__MACOSX/Wang Wu_12347_assignsubmission_file_/._ch34_prefix_cache.ipynb" in (
        skipped
    )


def test_a_zip_made_on_chinese_windows_keeps_its_gbk_names(tmp_path):
    # Windows' own zipper writes names in the local code page (GBK) without the UTF-8 flag;
    # Python's zipfile always sets the flag, so the name is patched in afterwards.
    gbk = "张三".encode("gbk")
    placeholder = b"X" * len(gbk)
    archive = make_zip(tmp_path / "class.zip", {placeholder.decode() + ".ipynb": NB})
    archive.write_bytes(archive.read_bytes().replace(placeholder, gbk))
    with discover(archive) as intake:
        named = [(s.source, s.student_id) for s in intake.submissions]
    assert named == [("张三.ipynb", "张三")]


def test_a_students_zip_with_gbk_names_under_the_utf8_flag_is_read(tmp_path):
    # Some zippers set the UTF-8 flag (bit 11) over GBK names; zipfile refused the whole zip with
    # a UnicodeDecodeError traceback, and one student's zip inside a Moodle export ended the run.
    gbk = "王五".encode("gbk")
    placeholder = b"X" * len(gbk)
    inner = make_zip(tmp_path / "inner.zip", {placeholder.decode() + "_2023001.ipynb": NB})
    data = bytearray(inner.read_bytes().replace(placeholder, gbk))
    for flags_at in (6, data.find(b"PK\x01\x02") + 8):
        data[flags_at + 1] |= 0x08
    export = make_zip(
        tmp_path / "export.zip",
        {"王五_103_assignsubmission_file/王五.zip": bytes(data), "2023002.ipynb": NB},
    )
    with discover(export) as intake:
        assert found(intake)[0] == {
            "王五_103_assignsubmission_file/王五.zip/王五_2023001.ipynb": ("103", False),
            "2023002.ipynb": ("2023002", False),
        }


def test_a_zip_cannot_write_outside_its_folder(tmp_path):
    archive = make_zip(tmp_path / "evil.zip", {"../../2023001.ipynb": NB, "/abs/x.ipynb": NB})
    with discover(archive) as intake:
        assert {s.source for s in intake.submissions} == {"2023001.ipynb", "abs/x.ipynb"}
        assert all(intake.scratch in s.path.parents for s in intake.submissions)
    assert not (tmp_path / "2023001.ipynb").exists()


def one_member_zip(path, patch):
    """A zip of one notebook, `patch(data, at)` applied at its local and its central header's
    flags field (the compression method follows it, at `at + 2`)."""
    data = bytearray(make_zip(path, {"ch34_prefix_cache.ipynb": NB}).read_bytes())
    for at in (6, data.find(b"PK\x01\x02") + 8):
        patch(data, at)
    return path.write_bytes(bytes(data)) and path


def encrypted(data, at):
    data[at] |= 1


def deflate64(data, at):
    data[at + 2 : at + 4] = b"\x09\x00"


def test_one_member_a_zip_cannot_extract_is_listed_and_the_rest_of_the_zip_graded(tmp_path):
    # A student's zip with a password (the flag bit 0) or compressed by Deflate64 (method 9, as
    # Windows' and 7-Zip's zippers may write): zipfile raises RuntimeError / NotImplementedError.
    locked = one_member_zip(tmp_path / "locked.zip", encrypted)
    packed = one_member_zip(tmp_path / "deflate64.zip", deflate64)
    export = make_zip(
        tmp_path / "export.zip",
        {
            "2023001.zip": locked.read_bytes(),
            "2023002.zip": packed.read_bytes(),
            "2023003.ipynb": NB,
            # the same path twice: once as written, once cut back from `../`, once as a folder
            "2023004.ipynb": NB,
            "../2023004.ipynb": "{}",
            "2023004.ipynb/ch34_prefix_cache.ipynb": NB,
            # a name longer than the file system's 255 bytes (Chinese: 3 bytes a character)
            "2023005_" + "第三十四章前缀缓存作业" * 9 + ".ipynb": NB,
            # a path over Linux's 4096 bytes, each of its names short enough
            "/".join(["d" * 200] * 25) + "/2023006.ipynb": NB,
        },
    )
    roster = write(tmp_path, "roster.csv", "学号\n2023001\n2023002\n2023003\n2023004\n2023005\n")
    with discover(export, roster=roster) as intake:
        graded, skipped = found(intake)
        kept = next(s.path for s in intake.submissions if s.student_id == "2023004")
        assert kept.read_text() == NB  # the first 2023004.ipynb, not the `../` one
    assert sorted(graded) == ["2023003.ipynb", "2023004.ipynb", next(s for s in graded if "…" in s)]
    assert graded[next(s for s in graded if "…" in s)] == ("2023005", False)
    assert skipped["2023001.zip/ch34_prefix_cache.ipynb"].startswith("not extracted: encrypted")
    assert (
        "method Python cannot read (zip method 9)" in skipped["2023002.zip/ch34_prefix_cache.ipynb"]
    )
    assert "same path" in skipped["../2023004.ipynb"]
    assert "a file and a folder" in skipped["2023004.ipynb/ch34_prefix_cache.ipynb"]
    assert "path is longer" in skipped["/".join(["d" * 200] * 25) + "/2023006.ipynb"]


def test_a_damaged_member_of_the_export_says_download_it_again(tmp_path):
    export = make_zip(tmp_path / "export.zip", {"2023001.ipynb": NB, "2023002.ipynb": NB})
    data = bytearray(export.read_bytes())
    data[200] ^= 0xFF  # inside the first member: its CRC no longer matches
    export.write_bytes(bytes(data))
    with pytest.raises(IntakeError, match="download the export again"):
        discover(export)


def test_a_folder_unzipped_on_linux_from_a_chinese_windows_zip_keeps_its_gbk_names(tmp_path):
    # `unzip` on Linux leaves a Windows zip's GBK names as bytes, which Python holds as
    # surrogates: intake.csv (UTF-8) could not be written.
    export = tmp_path / "export"
    folder = os.fsencode(export) + b"/" + "张三_101_assignsubmission_file".encode("gbk")
    os.makedirs(folder)
    Path(os.fsdecode(folder + b"/" + "作业.ipynb".encode("gbk"))).write_text(NB)
    Path(os.fsdecode(os.fsencode(export) + b"/" + "2023001_赵一.ipynb".encode("gbk"))).write_text(
        NB
    )
    roster = write(
        tmp_path, "roster.csv", "学号,姓名,lms_user_id\n2023001,赵一,\n2023005,张三,101\n"
    )
    with discover(export, roster=roster) as intake:
        graded, _ = found(intake)
        intake.write_csv(tmp_path / "report" / "intake.csv")
        assert all(s.path.is_file() for s in intake.submissions)
    assert graded == {
        "2023001_赵一.ipynb": ("2023001", False),
        "张三_101_assignsubmission_file/作业.ipynb": ("2023005", False),
    }


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda t: (t / "missing", {}), "does not exist"),
        (lambda t: (write(t, "export.zip", "not a zip"), {}), "is not a readable zip"),
        (lambda t: (write(t, "notes.txt"), {}), "neither a folder"),
        (
            lambda t: (t, {"roster": write(t, "r.csv", "id,name\n1,x\n")}),
            "has no student id column",
        ),
        (lambda t: (t, {"roster": t / "nope.csv"}), "roster"),
        (
            lambda t: (t, {"roster": write(t, "r.csv", "student_id\n1\n1\n")}),
            "appears on lines 2 and 3",
        ),
        (lambda t: (t, {"pattern": r"hw-(?P<id>\d+)"}), "no (?P<student_id>...) group"),
        (lambda t: (t, {"pattern": r"hw-(?P<student_id>\d+"}), "not a valid regular expression"),
    ],
)
def test_bad_input_says_what_to_fix(tmp_path, make, message):
    path, options = make(tmp_path)
    with pytest.raises(IntakeError, match=re.escape(message)):
        discover(path, **options)


def test_cli_exits_2_for_a_missing_folder_and_a_corrupt_zip(tmp_path):
    corrupt = write(tmp_path, "export.zip", "PK not a zip")
    for target, message in [(tmp_path / "missing", "does not exist"), (corrupt, "readable zip")]:
        run = subprocess.run(
            [sys.executable, "-m", "grader.kit.autograde", str(target), "--report", str(tmp_path)],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
        )
        assert run.returncode == 2 and message in run.stderr, run.stderr


def test_feedback_page_names_keep_the_id_but_no_path_separator():
    assert page_name("Wang Wu [final]") == "Wang Wu [final].html"
    assert page_name("a*b?") == "a*b?.html"
    assert page_name("../x/y\\z") == "_.._x_y_z.html"


def test_intake_csv_lists_every_file_with_its_outcome(tmp_path):
    export = tmp_path / "export"
    write(export, "2023001.ipynb")
    write(export, "._2023001.ipynb")
    with discover(export) as intake:
        intake.write_csv(tmp_path / "intake.csv", {"2023001": "graded"})
    raw = (tmp_path / "intake.csv").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf")  # Excel reads UTF-8 only with the BOM
    rows = list(csv.DictReader(raw.decode("utf-8-sig").splitlines()))
    assert rows == [  # sorted by file
        {
            "file": "._2023001.ipynb",
            "student_id": "",
            "outcome": "not graded",
            "why": "operating-system debris",
            "late": "no",
        },
        {
            "file": "2023001.ipynb",
            "student_id": "2023001",
            "outcome": "graded",
            "why": "id from the file's name",
            "late": "no",
        },
    ]


@pytest.mark.heavy  # nine notebooks graded (about 55 s); the ids alone: test_intake_command.py, and graded_batch grades a Moodle export
def test_one_batch_from_lms_exports_grades_every_student_under_the_right_id(fresh_build, tmp_path):
    """Moodle and Canvas zips, a Blackboard file, odd names and duplicates, graded for real."""
    release = read_nb(fresh_build / "notebooks" / NOTEBOOK_NAME)
    correct = nbformat.writes(
        filled_submission(release, read_nb(fresh_build / "solutions" / NOTEBOOK_NAME))
    )
    untouched = nbformat.writes(release)
    export = tmp_path / "export"
    export.mkdir()
    make_zip(
        export / "moodle.zip",
        {
            "Wang Wu_12347_assignsubmission_file_/ch34_prefix_cache.ipynb": correct,
            "__MACOSX/Wang Wu_12347_assignsubmission_file_/._ch34_prefix_cache.ipynb": "x",
        },
    )
    # Canvas (lib/content_zipper.rb): one student's correct notebook and a blank draft, the same
    # time in the zip; the draft's name sorts last, and must not be what is graded.
    make_zip(
        export / "canvas.zip",
        {
            "lisi_LATE_123457_7890124_ch34_prefix_cache.ipynb": correct,
            "lisi_LATE_123457_7890125_ch34_prefix_cache_draft.ipynb": untouched,
        },
    )
    # Two different students' notebooks of one generic name: never merged, never graded as one.
    write(export, "a/ch34 作业.ipynb", correct)
    make_zip(export / "b.zip", {"ch34 作业.ipynb": untouched})
    blackboard = "Ch 34_2023010_attempt_2026-11-30-10-15-00"
    write(export, f"{blackboard}_ch34_prefix_cache.ipynb", correct)
    write(export, f"{blackboard}.txt", "Name: Chen Shi")
    write(export, "2023004.IPYNB", correct)
    write(export, "2023003.ipynb", untouched, mtime=1_780_000_000)
    write(export, "2023003 (1).ipynb", correct, mtime=1_780_000_000)
    write(export, "._2023001.ipynb", "not a notebook")
    for name in ("Wang Wu [final]", "张三", "a*b?"):
        write(export, f"{name}.ipynb", correct)
    report = tmp_path / "report"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    run, rows = autograde(
        export,
        report,
        fresh_build / "build" / "grading-course",
        extra=["--roster", str(write(tmp_path, "roster.csv", ROSTER))],
        env={"TMPDIR": str(scratch)},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    expected = {  # student_id: (late, source)
        "2023007": (
            "no",
            "moodle.zip/Wang Wu_12347_assignsubmission_file_/ch34_prefix_cache.ipynb",
        ),
        "2023002": ("yes", "canvas.zip/lisi_LATE_123457_7890124_ch34_prefix_cache.ipynb"),
        "2023010": ("no", f"{blackboard}_ch34_prefix_cache.ipynb"),
        "2023004": ("no", "2023004.IPYNB"),
        "2023003": ("no", "2023003 (1).ipynb"),
        "2023005": ("no", "张三.ipynb"),
        "Wang Wu [final]": ("no", "Wang Wu [final].ipynb"),
        "a*b?": ("no", "a*b?.ipynb"),
        "2023001": ("no", ""),  # on the roster, no file of theirs: a row, `missing`
        "2023006": ("no", ""),
    }
    assert {sid: (row["late"], row["source"]) for sid, row in rows.items()} == expected
    assert {sid for sid, row in rows.items() if row["status"] == "missing"} == {
        "2023001",
        "2023006",
    }
    for student_id, row in rows.items():
        if row["status"] == "missing":
            continue
        assert row["status"] == "graded" and row["score"] == row["max_score"], (student_id, row)
        page = (report / "feedback" / f"{student_id}.html").read_text(encoding="utf-8")
        assert str(tmp_path) not in page
    with open(report / "intake.csv", newline="", encoding="utf-8-sig") as handle:
        intake = {row["file"]: row for row in csv.DictReader(handle)}
    draft = "canvas.zip/lisi_LATE_123457_7890125_ch34_prefix_cache_draft.ipynb"
    page = (report / "feedback" / "2023002.html").read_text(encoding="utf-8")
    assert "canvas.zip/lisi_LATE_123457_7890124_ch34_prefix_cache.ipynb" in page and draft in page
    assert {f: r["outcome"] for f, r in intake.items() if "ch34 作业" in f} == {
        "a/ch34 作业.ipynb": "student unknown",
        "b.zip/ch34 作业.ipynb": "student unknown",
    }
    not_graded = {
        draft: "2023002 的另一个 notebook，没有评分：评的是 "
        "canvas.zip/lisi_LATE_123457_7890124_ch34_prefix_cache.ipynb，"
        "与作业 notebook 同名的那个（文件时间相同）",
        "2023003.ipynb": "2023003 的另一个 notebook，没有评分：评的是 2023003 (1).ipynb，"
        "副本编号最大的那个（文件时间相同；“x (1)” 晚于 “x”）",
        "._2023001.ipynb": "operating-system debris",
        "moodle.zip/__MACOSX/Wang Wu_12347_assignsubmission_file_/._ch34_prefix_cache.ipynb": (
            "operating-system debris"
        ),
        f"{blackboard}.txt": "Blackboard's submission receipt",
    }
    assert {f: r["why"] for f, r in intake.items() if r["outcome"] == "not graded"} == not_graded
    assert intake["canvas.zip/lisi_LATE_123457_7890124_ch34_prefix_cache.ipynb"]["late"] == "yes"
    assert {r["file"] for r in intake.values() if r["outcome"] == "graded"} == {
        source for _, source in expected.values() if source
    }
    for source, why in not_graded.items():
        assert f"{source}: {why}" in run.stdout
    assert not any(p.name.startswith("ch34-intake-") for p in scratch.iterdir())
    # Regraded into the same report without the roster, the Canvas file is read as Canvas's user
    # 123457: what the previous run wrote for 2023002 from that file goes, and the run says so.
    canvas_only = tmp_path / "canvas-only"
    canvas_only.mkdir()
    (canvas_only / "canvas.zip").write_bytes((export / "canvas.zip").read_bytes())
    run, rows = autograde(canvas_only, report, fresh_build / "build" / "grading-course")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "2023002" not in rows and rows["123457"]["score"] == rows["123457"]["max_score"]
    assert not (report / "feedback" / "2023002.html").exists()
    assert "replacing what the previous run" in run.stderr and "2023002" in run.stderr


def test_a_roster_whose_ids_pandas_wrote_as_floats_reads_2025001_0_as_2025001(tmp_path):
    # `2025001.0` matched no file name: every file was "not on the roster", or, found by the
    # name, graded as 2025001.0 and written so into moodle.csv's ID number.
    roster = write(tmp_path, "roster.csv", "学号,lms_user_id\n2023003.0,12345.0\n2023004.0,\n")
    write(tmp_path, "export/2023003_孙三.ipynb", NB)
    with discover(tmp_path / "export", roster=roster) as intake:
        assert found(intake)[0] == {"2023003_孙三.ipynb": ("2023003", False)}
    assert Roster.read(roster).by_lms("12345") == "2023003"


def test_a_roster_in_excels_scientific_notation_says_how_to_save_the_column_as_text(tmp_path):
    # Excel saves a 12-digit 学号 in a narrow column as it shows it: every id becomes 2.02501E+11.
    roster = write(tmp_path, "roster.csv", "学号,姓名\n2.02501E+11,张三\n2.02501E+11,李四\n")
    with pytest.raises(IntakeError, match=r"line 2: student_id '2\.02501E\+11'.*“文本”"):
        Roster.read(roster)


@pytest.mark.parametrize(
    "data",
    [
        "学号\t姓名\r\n2023003\t孙三\r\n".encode("utf-16"),  # Excel's "Unicode 文本"
        "学号\t姓名\n2023003\t孙三\n".encode("gbk"),  # "文本文件(制表符分隔)"
        "学号;姓名\n2023003;孙三\n".encode("utf-8-sig"),  # where a comma is the decimal mark
    ],
    ids=["unicode-text", "gbk-tabs", "semicolons"],
)
def test_a_roster_saved_with_tabs_or_semicolons_or_as_unicode_text_is_read(tmp_path, data):
    (tmp_path / "roster.txt").write_bytes(data)
    assert Roster.read(tmp_path / "roster.txt").rows[0] == {
        "student_id": "2023003",
        "name": "孙三",
        "lms_user_id": "",
        "username": "",
        "email": "",
    }


def test_an_excel_workbook_passed_as_the_roster_says_save_it_as_csv(tmp_path):
    make_zip(
        tmp_path / "roster.xlsx", {"[Content_Types].xml": "<Types/>", "xl/workbook.xml": "<w/>"}
    )
    with pytest.raises(IntakeError, match="is an Excel workbook, not a CSV file.*CSV UTF-8"):
        Roster.read(tmp_path / "roster.xlsx")


def test_a_report_written_inside_the_export_is_not_read_as_submissions(tmp_path):
    # make autograde SUBMISSIONS=作业/ REPORT=作业/report, then again: the second run graded the
    # kit's own autograded copies (report/nbgrader/autograded/<id>/…), newer than the students'.
    export = tmp_path / "作业"
    write(export, "2023001.ipynb", NB)
    report = export / "report"
    write(
        report,
        "intake.csv",
        "\ufefffile,student_id,outcome,why,late\n2023001.ipynb,2023001,graded,,no\n",
    )
    write(report, f"nbgrader/autograded/2023001/{NOTEBOOK_NAME[:-6]}/{NOTEBOOK_NAME}", NB)
    with discover(export) as intake:
        graded, skipped = found(intake)
    assert graded == {"2023001.ipynb": ("2023001", False)}
    assert list(skipped) == ["report/"] and "a report this kit wrote" in skipped["report/"]


def test_a_symbolic_link_in_a_zip_is_listed_not_read_as_a_notebook(tmp_path):
    # zipfile writes a link member as a file holding its target: 2023001 got invalid_json, 0.
    archive = tmp_path / "class.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        link = zipfile.ZipInfo("2023001.ipynb")
        link.external_attr, link.create_system = 0o120777 << 16, 3
        zipped.writestr(link, "/etc/passwd")
        zipped.writestr("2023002.ipynb", NB)
    with discover(archive) as intake:
        graded, skipped = found(intake)
    assert graded == {"2023002.ipynb": ("2023002", False)}
    assert skipped == {"2023001.ipynb": "a symbolic link in the zip (not followed)"}


def test_a_roster_from_a_school_system_with_six_title_lines_finds_its_header(tmp_path):
    # Only the first 5 lines were searched: "has no student id column", listing the headers.
    titles = "XX大学学生名单\n课程名称：深度学习系统\n任课教师：王老师\n学期：2026 秋\n班级：计科1班\n选课人数：2\n"
    roster = write(
        tmp_path, "roster.csv", titles + "序号,学号,姓名\n1,2023003,孙三\n2,2023004,周四\n"
    )
    assert [row["student_id"] for row in Roster.read(roster).rows] == ["2023003", "2023004"]


def test_a_roster_with_a_footer_line_of_no_person_reads_its_students(tmp_path):
    # A 教务系统's `共 2 人` under the 序号 column: "line 5: the student_id is empty".
    text = "序号,学号,姓名\n1,2023003,孙三\n2,2023004,周四\n共 2 人,,\n打印时间：2026-12-01,,\n"
    assert [row["student_id"] for row in Roster.read(write(tmp_path, "r.csv", text)).rows] == [
        "2023003",
        "2023004",
    ]
    with pytest.raises(IntakeError, match="line 3: the student_id is empty"):
        Roster.read(write(tmp_path, "r.csv", "学号,姓名\n2023003,孙三\n,周四\n"))


def test_a_file_named_like_a_spreadsheet_formula_is_text_in_intake_and_grades_csv(tmp_path):
    """A student names his file `=HYPERLINK(…)`: intake.csv and grades.csv show it as text (a
    leading ', OWASP's rule for CSV injection), and the kit reads back the id it wrote."""
    from grader.kit.report.formats import FORMULA_START, write_csv
    from grader.kit.report.grades import read_grades

    export = tmp_path / "export"
    hostile = '=HYPERLINK("x.example","点我").ipynb'
    write(export, hostile)
    write(export, "@SUM(A1).ipynb")
    write(export, "2023001.ipynb")
    with discover(export) as intake:
        intake.write_csv(tmp_path / "intake.csv")
    rows = list(csv.reader((tmp_path / "intake.csv").read_text("utf-8-sig").splitlines()))
    cells = [cell for row in rows for cell in row]
    assert not [c for c in cells if c.startswith(FORMULA_START)], cells
    assert "'" + hostile in cells and "2023001.ipynb" in cells

    path = tmp_path / "grades.csv"
    write_csv(path, ["student_id", "score", "source"], [
        {"student_id": "=1+1", "score": "-1", "source": hostile},
        {"student_id": "2023001", "score": "+0.5", "source": "2023001.ipynb"},
    ])  # fmt: skip
    text = path.read_text("utf-8-sig")
    assert "'=1+1" in text and ",-1," in text and ",+0.5," in text
    _, back = read_grades(path)
    assert back["=1+1"]["source"] == hostile and back["2023001"]["score"] == "+0.5"
