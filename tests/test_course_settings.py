"""The Colab badge's repository: grader/course.toml, else a GitHub `origin` remote, else none."""

import subprocess

import pytest

from grader.kit.authoring.nbsource import COURSE_SETTINGS, colab_texts, colab_url, github_repo


def settings(tmp_path, value: str):
    path = tmp_path / "course.toml"
    path.write_text(f'github_repo = "{value}"\n')
    return path


def checkout(tmp_path, remote: str | None):
    root = tmp_path / "checkout"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    if remote:
        subprocess.run(["git", "-C", str(root), "remote", "add", "origin", remote], check=True)
    return root


def test_committed_setting_is_empty_or_names_a_repository():
    text = COURSE_SETTINGS.read_text(encoding="utf-8")
    assert "github_repo" in text
    github_repo()  # raises on a malformed value


def test_the_setting_wins_over_the_remote(tmp_path):
    root = checkout(tmp_path, "https://github.com/someone/fork.git")
    assert github_repo(settings(tmp_path, "school/ch34-kit"), root) == "school/ch34-kit"


@pytest.mark.parametrize(
    "remote",
    [
        "https://github.com/school/ch34-kit.git",
        "https://github.com/school/ch34-kit",
        "git@github.com:school/ch34-kit.git",
        "ssh://git@github.com/school/ch34-kit.git",
    ],
)
def test_an_empty_setting_takes_a_github_remote(tmp_path, remote):
    assert github_repo(settings(tmp_path, ""), checkout(tmp_path, remote)) == "school/ch34-kit"


@pytest.mark.parametrize("remote", [None, "/work/main", "https://gitlab.com/school/ch34-kit.git"])
def test_no_repository_when_the_remote_is_not_github(tmp_path, remote):
    # CI's clean clone has a local path as its remote: no badge, and the same notebook as committed
    assert github_repo(settings(tmp_path, ""), checkout(tmp_path, remote)) is None


def test_a_malformed_setting_says_what_to_write(tmp_path):
    with pytest.raises(ValueError, match='"owner/name"'):
        github_repo(settings(tmp_path, "https://github.com/school/ch34-kit"), tmp_path)


def test_badge_with_a_repository_and_upload_steps_without():
    with_repo = colab_texts("school/ch34-kit")
    assert colab_url("school/ch34-kit") in with_repo["{{colab_badge}}"]
    assert "colab-badge.svg" in with_repo["{{colab_badge}}"]
    without = colab_texts(None)
    assert "colab-badge.svg" not in without["{{colab_badge}}"]
    assert "上传笔记本" in without["{{colab_badge}}"]
