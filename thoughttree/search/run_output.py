"""Where a run is saved: the output path, checked before any work, and locked so that one process
writes it (an advisory lock on a ``.NAME.lock`` file beside it, which names the holder's pid)."""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from pathlib import Path

from ..tree.serialize import holds_run_file


class RunError(ValueError):
    """A run that cannot start as asked (an unwritable output, a resume file of another run)."""


def check_output(path: Path, flag: str = "--output") -> None:
    """Fail before any work when ``path`` cannot take the run file (``flag`` names the option
    that gave it): a directory, a missing folder, a place that cannot be written, or a file
    that is there and is not a thoughttree run file (it would be lost)."""
    if path.is_dir():
        raise RunError(f"{flag} {path} is a directory; give a file path such as {path / 'run.json'}")
    parent = path.parent
    if not parent.is_dir():
        raise RunError(f"{flag} {path}: the directory {parent} does not exist; create it first")
    probe = parent / f".{path.name}.{threading.get_ident()}.probe"
    try:
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise RunError(f"{flag} {path}: cannot write in {parent} ({exc.strerror}); choose another path") from None
    if path.exists() and not path.is_file():
        raise RunError(f"{flag} {path} exists and is not a file; choose another path")
    if path.is_file() and path.stat().st_size == 0:
        raise RunError(
            f"{flag} {path} is an empty file, not a thoughttree run file, which the run would "
            "replace; remove it or choose another path"
        )
    if path.is_file() and not holds_run_file(path):
        raise RunError(
            f"{flag} {path} holds a file that is not a thoughttree run file, which the run would "
            "replace; choose another path or move the file"
        )


_LOCKS: dict[str, tuple[Path, int]] = {}  # real path of a run file -> (its lock file, the locked descriptor)


def lock_path(path: Path) -> Path:
    """The lock file of the run file at ``path``: ``.NAME.lock`` beside it."""
    return path.with_name(f".{path.name}.lock")


def lock_run_file(path: Path, flag: str = "--output") -> bool:
    """Make this process the one writer of the file at ``path`` until :func:`unlock_run_file`, or
    its exit: an advisory ``fcntl.flock`` on ``.NAME.lock`` beside it, which holds this process's
    pid. RunError naming the other process (``flag`` names the option that gave the path) when
    another holds it. True when this call took the lock, False when this process held it already
    or the file system has no locks."""
    key = os.path.realpath(path)
    if key in _LOCKS:
        return False
    lock = lock_path(path)
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise RunError(
                f"{flag} {path}: cannot create its lock file {lock} ({exc.strerror}); choose another path"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise RunError(
                f"{flag} {path} is being written by another thoughttree process (pid {holder}); "
                "wait for it to end, or choose another path"
            ) from None
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                return False
            raise
        try:
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:  # else its last holder removed it between our open and our lock: take the new one
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode("ascii"))
    _LOCKS[key] = (lock, fd)
    return True


def unlock_run_file(path: Path) -> None:
    """Give up the lock :func:`lock_run_file` took on ``path`` (nothing when this process holds none)."""
    held = _LOCKS.pop(os.path.realpath(path), None)
    if held is not None:
        lock, fd = held
        lock.unlink(missing_ok=True)  # removed while still locked: a waiting opener sees it is gone
        os.close(fd)


def unlock_run_files() -> None:
    """Give up every run-file lock this process holds."""
    for _, (lock, fd) in list(_LOCKS.items()):
        lock.unlink(missing_ok=True)
        os.close(fd)
    _LOCKS.clear()


def holds_lock(path: Path) -> bool:
    """Whether this process holds the lock of the run file at ``path``."""
    return os.path.realpath(path) in _LOCKS
