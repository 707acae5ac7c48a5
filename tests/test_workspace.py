"""forwardedProps.iacCode.cwd: where a run may work."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aguiadapter.errors import AdapterError, ErrorCode
from aguiadapter.i18n import render_error
from aguiadapter.workspace import check_cwd

CWD = "forwardedProps.iacCode.cwd"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "workspaces"
    (path / "session-1").mkdir(parents=True)
    return path


def cwd_refusal(cwd: str, roots: list[str]) -> str:
    with pytest.raises(AdapterError) as caught:
        check_cwd(cwd, roots)
    assert caught.value.code is ErrorCode.INVALID_INPUT
    assert caught.value.params["path"] == CWD
    return caught.value.message_id


def test_a_directory_inside_the_root_is_returned_resolved(root: Path) -> None:
    assert check_cwd(str(root / "session-1"), [str(root)]) == os.path.realpath(root / "session-1")


def test_the_root_itself_is_allowed(root: Path) -> None:
    assert check_cwd(str(root), [str(root)]) == os.path.realpath(root)


def test_a_directory_that_does_not_exist_yet_is_allowed(root: Path) -> None:
    assert check_cwd(str(root / "new"), [str(root)]) == os.path.realpath(root / "new")


def test_without_roots_any_absolute_directory_is_allowed(tmp_path: Path) -> None:
    assert check_cwd(str(tmp_path), []) == os.path.realpath(tmp_path)


@pytest.mark.parametrize("cwd", ["", "relative/dir", "./x", "~/x", "/a/\x00b"])
def test_the_cwd_must_be_absolute(cwd: str) -> None:
    assert cwd_refusal(cwd, []) == "input_cwd_not_absolute"


def test_dot_dot_segments_are_refused_even_when_they_stay_inside(root: Path) -> None:
    assert cwd_refusal(f"{root}/session-1/../session-1", [str(root)]) == "input_cwd_not_absolute"


def test_a_sibling_with_the_same_prefix_is_outside(tmp_path: Path) -> None:
    (tmp_path / "ab").mkdir()
    (tmp_path / "abc").mkdir()
    assert cwd_refusal(str(tmp_path / "abc"), [str(tmp_path / "ab")]) == "input_cwd_outside_roots"


def test_a_symlink_escaping_the_root_is_refused(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    assert cwd_refusal(str(root / "escape"), [str(root)]) == "input_cwd_outside_roots"


def test_a_symlink_inside_the_root_resolves(root: Path) -> None:
    (root / "link").symlink_to(root / "session-1")
    assert check_cwd(str(root / "link"), [str(root)]) == os.path.realpath(root / "session-1")


def test_a_root_reached_through_a_symlink_is_resolved_too(root: Path, tmp_path: Path) -> None:
    (tmp_path / "root-link").symlink_to(root)
    assert check_cwd(str(root / "session-1"), [str(tmp_path / "root-link")]) == os.path.realpath(
        root / "session-1"
    )


def test_a_file_is_not_a_directory(root: Path) -> None:
    (root / "notes.txt").write_text("x")
    assert cwd_refusal(str(root / "notes.txt"), [str(root)]) == "input_cwd_not_directory"


def test_existence_outside_the_roots_is_not_revealed(root: Path, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("x")
    assert cwd_refusal(str(tmp_path / "secret.txt"), [str(root)]) == "input_cwd_outside_roots"


def test_cwd_messages_read_in_both_languages(root: Path) -> None:
    with pytest.raises(AdapterError) as caught:
        check_cwd("relative", [str(root)])
    assert render_error(caught.value, "en") == (
        "forwardedProps.iacCode.cwd must be an absolute path without '..' segments."
    )
    assert render_error(caught.value, "zh-CN") == (
        "forwardedProps.iacCode.cwd 必须是绝对路径，且不能包含“..”。"
    )
