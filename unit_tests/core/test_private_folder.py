"""private_folder: only a folder no one else can write is used; files in it are read warily.

Tests run as root, so another user's folder is simulated by making
``os.geteuid`` answer another uid. A FIFO that would block forever is read in
a thread whose join has a timeout: a hang fails the test instead of the run.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections.abc import Callable
from concurrent.futures import Future, wait
from pathlib import Path
from typing import TypeVar

import pytest

from grammar_guard.core.private_folder import (
    UnsafeFileError,
    check_private_folder,
    claim_private_folder,
    open_regular_file,
    read_regular_file,
    write_file_atomically,
)

BLOCK_GUARD_S = 10.0
ANOTHER_UID = 4242
Result = TypeVar("Result")


def finishes(call: Callable[[], Result]) -> Result:
    """What ``call()`` returns or raises; fails the test, instead of hanging it, if it blocks.

    A daemon thread: one left blocked does not hold up the end of the run.
    """
    outcome: Future[Result] = Future()

    def run() -> None:
        try:
            outcome.set_result(call())
        except BaseException as exc:
            outcome.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    _, blocked = wait([outcome], timeout=BLOCK_GUARD_S)
    if blocked:
        pytest.fail(f"still blocked after {BLOCK_GUARD_S} s")
    return outcome.result()


Loosen = Callable[[Path, pytest.MonkeyPatch], Path]


def _world_writable(folder: Path, _monkeypatch: pytest.MonkeyPatch) -> Path:
    folder.chmod(0o777)
    return folder


def _group_writable(folder: Path, _monkeypatch: pytest.MonkeyPatch) -> Path:
    folder.chmod(0o770)
    return folder


def _behind_a_symlink(folder: Path, _monkeypatch: pytest.MonkeyPatch) -> Path:
    link = folder.with_name(f"{folder.name}-link")
    link.symlink_to(folder, target_is_directory=True)
    return link


def _owned_by_another_user(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(os, "geteuid", lambda: ANOTHER_UID)
    return folder


# Ways a private folder, contents and all, becomes one others could have
# written to: each returns the path a setting would name, and the words its
# refusal must contain. Other modules' tests use them on their own folders.
UNSAFE_FOLDERS: dict[str, tuple[Loosen, str]] = {
    "world-writable": (_world_writable, "other users can write"),
    "group-writable": (_group_writable, "other users can write"),
    "a symlink": (_behind_a_symlink, "symbolic link"),
    "another owner": (_owned_by_another_user, f"not to this process's uid {ANOTHER_UID}"),
}


@pytest.fixture(params=UNSAFE_FOLDERS.values(), ids=UNSAFE_FOLDERS.keys())
def refused(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, str]:
    """A folder the check refuses, and the words its refusal must contain."""
    loosen, reason = request.param
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o700)
    return loosen(folder, monkeypatch), reason


# --- the folder --------------------------------------------------------------------------


def test_a_missing_folder_is_created_private(tmp_path: Path) -> None:
    folder = tmp_path / "a" / "cache"
    assert check_private_folder(folder).usable
    status = os.lstat(folder)
    assert stat.S_ISDIR(status.st_mode) and stat.S_IMODE(status.st_mode) == 0o700


def test_an_existing_private_folder_is_used_as_it_is(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o750)  # readable by the group is fine; writable is not
    (folder / "kept").write_text("x")
    assert check_private_folder(folder).usable
    assert (folder / "kept").read_text() == "x"


def test_a_folder_others_could_write_to_is_refused_with_the_reason(
    refused: tuple[Path, str],
) -> None:
    folder, reason = refused
    verdict = check_private_folder(folder)
    assert not verdict.usable
    assert verdict.refusal is not None and reason in verdict.refusal


def test_a_file_is_not_a_folder(tmp_path: Path) -> None:
    path = tmp_path / "cache"
    path.write_text("")
    assert check_private_folder(path).refusal == "it is not a folder"


def test_a_refusal_is_logged_once_and_lasts_even_once_the_folder_is_fixed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    with caplog.at_level(logging.WARNING):
        assert not claim_private_folder(folder, "testing")
        folder.chmod(0o700)  # what was planted while it was open is still there
        assert not claim_private_folder(folder, "testing")
    lines = [record.getMessage() for record in caplog.records if str(folder) in record.getMessage()]
    assert len(lines) == 1 and "other users can write" in lines[0] and "testing" in lines[0]


def test_a_private_folder_is_claimed_without_a_word(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        assert claim_private_folder(tmp_path / "cache", "testing")
    assert caplog.records == []


def test_a_folder_that_cannot_be_created_raises_instead_of_being_judged(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(OSError):
        check_private_folder(blocker / "cache")


# --- reading -----------------------------------------------------------------------------


def test_a_regular_file_is_read_whole_up_to_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "entry"
    path.write_bytes(b"x" * 100)
    data, status = read_regular_file(path, 100)
    assert data == b"x" * 100 and status.st_size == 100
    with pytest.raises(UnsafeFileError, match="larger than the 99 bytes"):
        read_regular_file(path, 99)


def test_a_symbolic_link_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "secret"
    target.write_text("the user's own file")
    link = tmp_path / "entry"
    link.symlink_to(target)
    with pytest.raises(UnsafeFileError, match="symbolic link"):
        read_regular_file(link, 1 << 20)
    with pytest.raises(UnsafeFileError, match="symbolic link"):
        open_regular_file(link)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "entry"
    os.mkfifo(fifo)
    with pytest.raises(UnsafeFileError, match="not a regular file"):
        finishes(lambda: read_regular_file(fifo, 1 << 20))
    with pytest.raises(UnsafeFileError, match="not a regular file"):
        finishes(lambda: open_regular_file(fifo))


def test_a_folder_is_not_read_as_a_file(tmp_path: Path) -> None:
    with pytest.raises(UnsafeFileError, match="not a regular file"):
        read_regular_file(tmp_path, 1 << 20)


def test_a_file_over_the_limit_is_refused_on_its_size_before_any_read(tmp_path: Path) -> None:
    path = tmp_path / "entry"
    with path.open("wb") as file:
        file.truncate(1 << 40)  # sparse: a read of it would never end
    with pytest.raises(UnsafeFileError, match="larger than"):
        finishes(lambda: read_regular_file(path, 1 << 20))


# --- writing -----------------------------------------------------------------------------


def test_a_write_replaces_a_planted_link_and_leaves_its_target_alone(tmp_path: Path) -> None:
    target = tmp_path / "secret"
    target.write_text("the user's own file")
    path = tmp_path / "entry"
    path.symlink_to(target)
    write_file_atomically(path, b"new", durable=True)
    assert target.read_text() == "the user's own file"
    status = os.lstat(path)
    assert stat.S_ISREG(status.st_mode) and stat.S_IMODE(status.st_mode) == 0o600
    assert path.read_bytes() == b"new"
    assert sorted(os.listdir(tmp_path)) == ["entry", "secret"]  # no temporary file left
