"""forwardedProps.iacCode.cwd: a workspace that cannot be one is refused before any stream."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from aguiadapter.errors import AdapterError, ErrorCode
from aguiadapter.i18n import render_error
from aguiadapter import workspace
from aguiadapter.workspace import MAX_NAME_BYTES, MAX_PATH_BYTES, check_workspace_path, resolve_workspace
from tests.support.adapter import RunningAdapter, run_body

CWD = "forwardedProps.iacCode.cwd"


#: The conventional unprivileged uid (and gid) "nobody".
NOBODY = 65534


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "workspaces"
    (path / "session-1").mkdir(parents=True)
    return path


async def cwd_refusal(cwd: str, roots: list[str]) -> AdapterError:
    with pytest.raises(AdapterError) as caught:
        await resolve_workspace(cwd, roots)
    assert caught.value.code is ErrorCode.INVALID_INPUT
    assert caught.value.params["path"] == CWD
    return caught.value


def deep_path(base: Path, total_bytes: int) -> str:
    """An absolute path below ``base`` of exactly ``total_bytes`` UTF-8 bytes."""
    path = str(base)
    while len(path) + 101 < total_bytes:
        path += "/" + "d" * 100
    return path + "/" + "e" * (total_bytes - len(path) - 1)


# --- accepted ----------------------------------------------------------------------


async def test_a_directory_inside_the_root_is_returned_resolved(root: Path) -> None:
    assert await resolve_workspace(str(root / "session-1"), [str(root)]) == os.path.realpath(root / "session-1")


async def test_the_root_itself_is_allowed(root: Path) -> None:
    assert await resolve_workspace(str(root), [str(root)]) == os.path.realpath(root)


async def test_a_directory_that_does_not_exist_yet_is_allowed(root: Path) -> None:
    assert await resolve_workspace(str(root / "new"), [str(root)]) == os.path.realpath(root / "new")


async def test_without_roots_any_absolute_directory_is_allowed(tmp_path: Path) -> None:
    assert await resolve_workspace(str(tmp_path), []) == os.path.realpath(tmp_path)


async def test_a_symlink_inside_the_root_resolves(root: Path) -> None:
    (root / "link").symlink_to(root / "session-1")
    assert await resolve_workspace(str(root / "link"), [str(root)]) == os.path.realpath(root / "session-1")


async def test_a_root_reached_through_a_symlink_is_resolved_too(root: Path, tmp_path: Path) -> None:
    (tmp_path / "root-link").symlink_to(root)
    resolved = await resolve_workspace(str(root / "session-1"), [str(tmp_path / "root-link")])
    assert resolved == os.path.realpath(root / "session-1")


async def test_the_longest_names_and_paths_pass(root: Path) -> None:
    name = "n" * MAX_NAME_BYTES
    assert await resolve_workspace(str(root / name), [str(root)]) == os.path.realpath(root / name)
    check_workspace_path(deep_path(root, MAX_PATH_BYTES))


# --- the text of the path (no file system) -------------------------------------------


@pytest.mark.parametrize("cwd", ["", "relative/dir", "./x", "~/x", "/a/\x00b"])
async def test_the_cwd_must_be_absolute(cwd: str) -> None:
    assert (await cwd_refusal(cwd, [])).message_id == "input_cwd_not_absolute"


async def test_dot_dot_segments_are_refused_even_when_they_stay_inside(root: Path) -> None:
    error = await cwd_refusal(f"{root}/session-1/../session-1", [str(root)])
    assert error.message_id == "input_cwd_not_absolute"


@pytest.mark.parametrize(
    ("name", "bytes_"),
    [("x" * (MAX_NAME_BYTES + 1), MAX_NAME_BYTES + 1), ("é" * 128, 256), ("工" * 86, 258)],
    ids=["256 ASCII", "128 two-byte characters", "86 three-byte characters"],
)
def test_a_component_over_255_bytes_is_refused(root: Path, name: str, bytes_: int) -> None:
    assert len(name.encode()) == bytes_
    with pytest.raises(AdapterError) as caught:
        check_workspace_path(str(root / name / "inside"))
    assert caught.value.message_id == "input_cwd_name_too_long"
    assert render_error(caught.value, "en") == f"{CWD} has a component longer than 255 bytes (UTF-8)."


def test_a_path_over_the_limit_is_refused(root: Path) -> None:
    with pytest.raises(AdapterError) as caught:
        check_workspace_path(deep_path(root, MAX_PATH_BYTES + 1))
    assert caught.value.message_id == "input_cwd_too_long"
    assert "4095" in render_error(caught.value, "zh-CN")


# --- what the file system says -------------------------------------------------------


async def test_a_sibling_with_the_same_prefix_is_outside(tmp_path: Path) -> None:
    (tmp_path / "ab").mkdir()
    (tmp_path / "abc").mkdir()
    error = await cwd_refusal(str(tmp_path / "abc"), [str(tmp_path / "ab")])
    assert error.message_id == "input_cwd_outside_roots"


async def test_a_symlink_escaping_the_root_is_refused(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    assert (await cwd_refusal(str(root / "escape"), [str(root)])).message_id == "input_cwd_outside_roots"


async def test_a_file_is_not_a_directory(root: Path) -> None:
    (root / "notes.txt").write_text("x")
    assert (await cwd_refusal(str(root / "notes.txt"), [str(root)])).message_id == "input_cwd_not_directory"


async def test_a_path_below_a_file_is_refused(root: Path) -> None:
    (root / "notes.txt").write_text("x")
    error = await cwd_refusal(str(root / "notes.txt" / "deeper"), [str(root)])
    assert error.message_id == "input_cwd_below_file"


@pytest.mark.parametrize("below", ["", "inside"])
async def test_a_symlink_loop_is_refused(root: Path, below: str) -> None:
    (root / "a").symlink_to(root / "b")
    (root / "b").symlink_to(root / "a")
    error = await cwd_refusal(str(root / "a" / below), [str(root)])
    assert error.message_id == "input_cwd_symlink_loop"
    assert render_error(error, "en") == f"{CWD} cannot be resolved: its symbolic links form a loop."


async def test_a_path_that_grows_too_long_once_resolved_is_refused(root: Path) -> None:
    target = deep_path(root, MAX_PATH_BYTES - 200)
    (root / "short").symlink_to(target)
    error = await cwd_refusal(str(root / "short" / ("x" * 250)), [str(root)])
    assert error.message_id == "input_cwd_too_long"


def refusal_in_a_child(cwd: str, roots: list[str], *, as_uid: int | None) -> str:
    """The refusal's message id, checked in a forked child (as ``as_uid``
    when given: root may search any directory, a server need not be root)."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop privileges, check, report, leave
        os.close(reader)
        outcome = "accepted"
        try:
            if as_uid is not None:
                os.setgid(as_uid)
                os.setuid(as_uid)
            workspace._resolve_on_disk(cwd, tuple(roots))
        except AdapterError as exc:
            outcome = exc.message_id
        except BaseException as exc:  # noqa: BLE001 - anything else is the test's failure
            outcome = f"crashed: {exc!r}"
        os.write(writer, outcome.encode())
        os._exit(0)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        outcome = pipe.read().decode()
    os.waitpid(pid, 0)
    return outcome


def test_a_directory_the_server_may_not_search_is_refused() -> None:
    base = Path(tempfile.mkdtemp())
    try:
        base.chmod(0o755)
        locked = base / "locked"
        (locked / "inside").mkdir(parents=True)
        # Run as root (as CI does), the check runs as "nobody" for whom a
        # root-owned 0700 folder is closed; otherwise the folder is closed to all.
        as_uid = NOBODY if os.geteuid() == 0 else None
        locked.chmod(0o700 if as_uid is not None else 0)
        try:
            outcome = refusal_in_a_child(str(locked / "inside"), [str(base)], as_uid=as_uid)
        finally:
            locked.chmod(0o755)
    finally:
        shutil.rmtree(base)
    assert outcome == "input_cwd_inaccessible"


async def test_existence_outside_the_roots_is_not_revealed(root: Path, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("x")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for outside in (tmp_path / "secret.txt", tmp_path / "secret.txt" / "x", tmp_path / "loop"):
        assert (await cwd_refusal(str(outside), [str(root)])).message_id == "input_cwd_outside_roots"


async def test_cwd_messages_read_in_both_languages(root: Path) -> None:
    error = await cwd_refusal("relative", [str(root)])
    assert render_error(error, "en") == f"{CWD} must be an absolute path without '..' segments."
    assert render_error(error, "zh-CN") == f"{CWD} 必须是绝对路径，且不能包含“..”。"


# --- a folder that passed, remembered for a moment ------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _becomes_a_file(path: Path) -> None:
    shutil.rmtree(path)
    path.write_text("x")


async def test_a_folder_that_passed_is_taken_again_until_its_moment_ends(root: Path) -> None:
    clock = _Clock()
    checked = workspace.CheckedWorkspaces(seconds=2.0, clock=clock)
    folder = root / "session-1"
    assert await resolve_workspace(str(folder), [str(root)], checked=checked, user="alice") == os.path.realpath(folder)
    _becomes_a_file(folder)
    clock.now += 1.9
    # Within the moment, the path that passed (inside the root) is what the runtime gets.
    assert await resolve_workspace(str(folder), [str(root)], checked=checked, user="alice") == os.path.realpath(folder)
    clock.now += 0.2
    with pytest.raises(AdapterError) as refused:
        await resolve_workspace(str(folder), [str(root)], checked=checked, user="alice")
    assert refused.value.message_id == "input_cwd_not_directory"


async def test_a_refusal_is_never_remembered(root: Path) -> None:
    checked = workspace.CheckedWorkspaces(clock=_Clock())
    folder = root / "later"
    folder.write_text("x")
    with pytest.raises(AdapterError):
        await resolve_workspace(str(folder), [str(root)], checked=checked, user="alice")
    folder.unlink()
    folder.mkdir()
    assert await resolve_workspace(str(folder), [str(root)], checked=checked, user="alice") == os.path.realpath(folder)


async def test_one_user_s_pass_is_not_another_s(root: Path) -> None:
    checked = workspace.CheckedWorkspaces(clock=_Clock())
    folder = root / "session-1"
    await resolve_workspace(str(folder), [str(root)], checked=checked, user="alice")
    _becomes_a_file(folder)
    with pytest.raises(AdapterError) as refused:
        await resolve_workspace(str(folder), [str(root)], checked=checked, user="bob")
    assert refused.value.message_id == "input_cwd_not_directory"


async def test_the_remembered_folders_are_bounded_the_oldest_going_first(root: Path) -> None:
    checked = workspace.CheckedWorkspaces(size=2, clock=_Clock())
    folders = [root / name for name in ("a", "b", "c")]
    for folder in folders:
        folder.mkdir()
        await resolve_workspace(str(folder), [str(root)], checked=checked, user="alice")
    assert len(checked) == 2
    _becomes_a_file(folders[0])
    _becomes_a_file(folders[2])
    with pytest.raises(AdapterError):  # forgotten: looked at again
        await resolve_workspace(str(folders[0]), [str(root)], checked=checked, user="alice")
    assert await resolve_workspace(str(folders[2]), [str(root)], checked=checked, user="alice")


async def test_other_roots_are_another_check(root: Path, tmp_path: Path) -> None:
    checked = workspace.CheckedWorkspaces(clock=_Clock())
    folder = root / "session-1"
    await resolve_workspace(str(folder), [str(root)], checked=checked, user="alice")
    with pytest.raises(AdapterError) as refused:
        await resolve_workspace(str(folder), [str(tmp_path / "elsewhere")], checked=checked, user="alice")
    assert refused.value.message_id == "input_cwd_outside_roots"


async def test_a_remembered_pass_makes_no_trip_and_does_the_request_s_other_look_here(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    checked = workspace.CheckedWorkspaces(clock=_Clock())
    folder = str(root / "session-1")
    looks: list[int] = []
    await resolve_workspace(folder, [str(root)], lambda: looks.append(threading.get_ident()), checked=checked,
                            user="alice")
    assert looks[0] != threading.get_ident()  # the first look: on the worker thread, with the check

    async def no_trip(*args: object, **kwargs: object) -> object:
        raise AssertionError("a remembered pass made a trip to a worker thread")

    monkeypatch.setattr(workspace.asyncio, "to_thread", no_trip)
    await resolve_workspace(folder, [str(root)], lambda: looks.append(threading.get_ident()), checked=checked,
                            user="alice")
    assert looks[1] == threading.get_ident()


async def test_a_run_s_workspace_is_checked_per_user_through_the_app(adapter: RunningAdapter, tmp_path: Path) -> None:
    workspace_dir = tmp_path / "workspaces" / "shared"
    workspace_dir.mkdir(parents=True)
    first = await adapter.run(run_body(thread_id="t-alice-1", text="hello", cwd=str(workspace_dir), userId="alice"))
    assert first.status == 200
    _becomes_a_file(workspace_dir)
    # Bob's first run in that path is looked at on disk: the folder is a file now.
    refused = await adapter.run(run_body(thread_id="t-bob-1", text="hello", cwd=str(workspace_dir), userId="bob"))
    assert refused.status == 400, refused.body
    assert refused.json()["error"]["code"] == "INVALID_INPUT"
