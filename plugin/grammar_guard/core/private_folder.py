"""Folders only this user can write, and files read back from them without trusting them.

The persistent cache and the metrics files live in folders whose contents the
plugin reads back. Whoever can write such a folder can plant a file there: a
cache entry whose header names any key (a grammar served for another
request), metrics with made-up labels, a symbolic link that turns the next
write into an overwrite of one of this user's files, or a FIFO that blocks a
read forever. Checking a file's header cannot help, since its writer chose
it; only the folder can be trusted or not. So a folder is used only while it
is private: a real directory (not a symbolic link), owned by the effective
user, writable by neither its group nor others. A missing one is created so.

Files inside are still handled as if hostile, for the mistakes a check
cannot see (a file planted before the folder was tightened, the user's own
links): opened without following a symbolic link and without blocking,
regular files only, read up to a limit, written under a fresh name and
renamed into place.
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import os
import stat
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

PRIVATE_MODE = 0o700
# A temporary file's name while it is written, before the rename.
TEMP_PREFIX = ".tmp-"
TEMP_SUFFIX = ".partial"

_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
# O_NONBLOCK: opening a FIFO with no writer returns at once instead of
# waiting for one. It changes nothing for a regular file's reads.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

_refused: set[Path] = set()
_refused_lock = threading.Lock()


@dataclass(frozen=True)
class FolderVerdict:
    """Whether a folder is private; ``refusal`` says why it is not (None: it is)."""

    refusal: str | None = None

    @property
    def usable(self) -> bool:
        return self.refusal is None


class UnsafeFileError(OSError):
    """A path that is no regular file (a link, a FIFO, a device, a folder), or one too large."""


def check_private_folder(folder: Path) -> FolderVerdict:
    """Create ``folder`` (mode 0700) if it is missing, then tell whether it is private.

    Raises OSError only when it is missing and cannot be created (a read-only
    disk, a file where a parent should be): a failure to use it now, not a
    verdict on whom it belongs to.
    """
    try:
        status = os.lstat(folder)
    except FileNotFoundError:
        # exist_ok: another process may create it meanwhile; lstat then checks theirs.
        folder.mkdir(mode=PRIVATE_MODE, parents=True, exist_ok=True)
        status = os.lstat(folder)
    return FolderVerdict(_refusal(status))


def _refusal(status: os.stat_result) -> str | None:
    if stat.S_ISLNK(status.st_mode):
        return "it is a symbolic link; name the folder itself"
    if not stat.S_ISDIR(status.st_mode):
        return "it is not a folder"
    owner = os.geteuid()
    if status.st_uid != owner:
        return f"it belongs to uid {status.st_uid}, not to this process's uid {owner}"
    if status.st_mode & _OTHERS_WRITE:
        mode = stat.S_IMODE(status.st_mode)
        return f"other users can write to it (mode {mode:04o}); chmod go-w it"
    return None


def claim_private_folder(folder: Path, purpose: str) -> bool:
    """Whether ``folder`` may be used for ``purpose`` now (see :func:`check_private_folder`).

    A refused folder stays refused for the life of the process, even if it is
    tightened later (what was planted while it was open is still there), and
    its refusal is logged once. Raises OSError when it cannot be created.
    """
    with _refused_lock:
        if folder in _refused:
            return False
    verdict = check_private_folder(folder)
    if verdict.usable:
        return True
    with _refused_lock:
        first = folder not in _refused
        _refused.add(folder)
    if first:
        logger.warning("grammar-guard: not using %s for %s: %s", folder, purpose, verdict.refusal)
    return False


def open_regular_file(path: Path) -> io.BufferedReader:
    """``path`` opened for reading if it is a regular file, never through a symbolic link."""
    descriptor, _ = _open_regular(path)
    return os.fdopen(descriptor, "rb")


def read_regular_file(path: Path, max_bytes: int) -> tuple[bytes, os.stat_result]:
    """The contents of the regular file ``path`` and its status, if at most ``max_bytes``.

    A larger file is refused on its size, before anything is read; one that
    grows while it is read is read no further than ``max_bytes + 1`` bytes.
    """
    descriptor, status = _open_regular(path)
    with os.fdopen(descriptor, "rb") as file:
        if status.st_size > max_bytes:
            raise _too_large(path, max_bytes)
        data = file.read(status.st_size + 1)
        if len(data) > status.st_size:  # it grew since fstat
            data += file.read(max_bytes + 1 - len(data))
    if len(data) > max_bytes:
        raise _too_large(path, max_bytes)
    return data, status


def _open_regular(path: Path) -> tuple[int, os.stat_result]:
    try:
        descriptor = os.open(path, _READ_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # what O_NOFOLLOW answers for a link
            raise UnsafeFileError(exc.errno, "a symbolic link, not followed", str(path)) from exc
        raise
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise UnsafeFileError(errno.EINVAL, "not a regular file", str(path))
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor, status


def _too_large(path: Path, max_bytes: int) -> UnsafeFileError:
    return UnsafeFileError(errno.EFBIG, f"larger than the {max_bytes} bytes allowed", str(path))


def write_file_atomically(path: Path, data: bytes, *, durable: bool) -> None:
    """Replace ``path`` with a file holding ``data``; a reader sees the old file or the new one.

    The data goes to a new temporary file in the same folder, created by
    ``tempfile.mkstemp``: mode 0600, O_EXCL and O_NOFOLLOW, so no name planted
    in the folder can redirect the write. The rename then replaces whatever
    ``path`` is, a symbolic link included, never what a link points to.
    ``durable``: the file and the rename are flushed to disk before returning.
    """
    descriptor, temp_name = tempfile.mkstemp(
        prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX, dir=path.parent
    )
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            if durable:
                file.flush()
                os.fsync(file.fileno())
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp_name)
        raise
    if durable:
        _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    """Make a rename itself durable (a crash right after would otherwise lose it)."""
    with contextlib.suppress(OSError):  # not every platform or filesystem allows it
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
