"""How the driver is started: inside bubblewrap (the default), or without isolation by name.

``"bwrap"`` starts the driver with bubblewrap in new user, PID, network, mount, IPC, UTS and
cgroup namespaces: no network but a private loopback; read-only, only the interpreter, its
install prefix and the system's shared libraries (``/usr/lib``, ``/lib``: no shell, no other
programs); a fresh ``/proc``; a minimal read-only ``/dev`` with a small ``/dev/shm``; a
size-capped private tmpfs on ``/tmp`` as the writable place (home and working directory); an
empty environment but ``PATH``, ``HOME`` and ``LANG``; uid/gid 65534 inside. When the evaluator
runs as root, bubblewrap itself is started as the unprivileged user ``nobody`` (uid 65534), so
the sandbox is not root outside its namespaces either. The driver, its modules (the call runner
and the wire module among them) and the program come in as read-only files copied from memory;
expected outputs never enter. The driver is the PID namespace's init (bubblewrap's ``--as-pid-1``): no process of the
sandbox but the driver holds the pipes to the evaluator. The sandbox dies with its parent.

``"none-unsafe"`` runs the same driver as the evaluator's own user in a temporary directory with
a cleared environment and the same resource limits, but with no namespaces: the program can
read any file the evaluator can, use the network, and leave processes that escape its session.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

ISOLATIONS = ("bwrap", "none-unsafe")
NOBODY = 65534
SCRATCH_BYTES = 64 << 20
SHM_BYTES = 16 << 20
PATH = "/usr/local/bin:/usr/bin:/bin"
HERE = Path(__file__).resolve().parent
INSIDE = "/sandbox"
# The driver and the modules it imports from beside it (children.OWN_MODULES names them).
DRIVER_FILES = ("driver.py", "wire.py", "call.py", "streams.py", "children.py", "candidate.py")
SYSTEM_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")


class SandboxUnavailable(RuntimeError):
    """The requested isolation cannot be set up on this machine; the message says what is missing."""


@dataclass
class Launch:
    """A ready-to-start driver: the command, how to start it, and its request's fixed fields."""

    argv: list[str]
    program: str
    kill_all: bool
    cwd: str
    env: dict[str, str] | None = None
    user: int | None = None
    pass_fds: tuple[int, ...] = ()
    info_fd: int | None = None
    files: list[int] = field(default_factory=list)


def _open_to_others(path: str) -> bool:
    """Whether uid 65534 could reach and read/execute ``path`` (every parent searchable)."""
    real = Path(os.path.realpath(path))
    try:
        mode = real.stat().st_mode
        if not (mode & stat.S_IROTH and mode & stat.S_IXOTH):
            return False
        return all(parent.stat().st_mode & stat.S_IXOTH for parent in real.parents)
    except OSError:
        return False


def interpreter(for_others: bool) -> tuple[str, str]:
    """(Python executable, install prefix to show) for the sandbox."""
    base = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    prefix = os.path.realpath(sys.base_prefix)
    if not for_others or (_open_to_others(base) and _open_to_others(prefix)):
        return base, prefix
    for candidate in SYSTEM_PYTHONS:
        real = os.path.realpath(candidate)
        if os.path.isfile(real) and real.startswith("/usr/") and _open_to_others(real):
            return real, "/usr"
    raise SandboxUnavailable(
        f"no Python interpreter the unprivileged sandbox user can run: {base} lies in a directory closed "
        "to other users and no system python3 exists; install one (apt-get install -y python3)"
    )


def _data_fd(text: str, name: str) -> int:
    fd = os.memfd_create(name, 0)
    os.write(fd, text.encode("utf-8"))
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _system_binds(python: str, prefix: str) -> list[str]:
    """The interpreter, its install prefix and the system's shared libraries; nothing else."""
    args = []
    for top in ("/lib", "/lib32", "/lib64", "/libx32", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    args += ["--ro-bind", python, python]
    if not prefix.startswith("/usr"):
        args += ["--ro-bind", prefix, prefix]
    return args


def _bwrap(program: str, bwrap: str) -> Launch:
    found = shutil.which(bwrap)
    if found is None:
        raise SandboxUnavailable(
            f"bubblewrap is not installed ({bwrap!r} not found): install it with your package manager "
            "(`apt-get install -y bubblewrap` as root), or choose isolation='none-unsafe' to run programs without "
            "isolation"
        )
    as_root = os.geteuid() == 0
    python, prefix = interpreter(for_others=as_root)
    names = [*DRIVER_FILES, "program.py"]
    files = [_data_fd((HERE / name).read_text(), name.removesuffix(".py")) for name in DRIVER_FILES]
    files.append(_data_fd(program, "program"))
    binds = [arg for fd, name in zip(files, names) for arg in ("--ro-bind-data", str(fd), f"{INSIDE}/{name}")]
    info_r, info_w = os.pipe()
    argv = [
        found, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
        "--as-pid-1",
        "--clearenv", "--setenv", "PATH", PATH, "--setenv", "HOME", "/tmp", "--setenv", "LANG", "C.UTF-8",
        "--hostname", "sandbox", "--uid", str(NOBODY), "--gid", str(NOBODY),
        *_system_binds(python, prefix),
        "--proc", "/proc", "--dev", "/dev", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm",
        "--size", str(SCRATCH_BYTES), "--tmpfs", "/tmp",
        *binds,
        "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp", "--info-fd", str(info_w),
        python, "-I", f"{INSIDE}/driver.py",
    ]
    return Launch(
        argv=argv, program=f"{INSIDE}/program.py", kill_all=True, cwd="/",
        user=NOBODY if as_root else None, pass_fds=(*files, info_w), info_fd=info_r, files=[*files, info_w],
    )


@contextmanager
def launch(program: str, isolation: str, bwrap: str = "bwrap") -> Iterator[Launch]:
    """The driver's launch for ``isolation``; file descriptors and scratch files go away after."""
    if isolation not in ISOLATIONS:
        raise ValueError(f"isolation must be one of {', '.join(map(repr, ISOLATIONS))}, got {isolation!r}")
    if isolation == "bwrap":
        spec = _bwrap(program, bwrap)
        try:
            yield spec
        finally:
            for fd in [*spec.files, *([] if spec.info_fd is None else [spec.info_fd])]:
                try:
                    os.close(fd)
                except OSError:
                    pass
        return
    scratch = tempfile.mkdtemp(prefix="thoughttree-sandbox-")
    try:
        path = Path(scratch) / "program.py"
        path.write_text(program, encoding="utf-8")
        python, _ = interpreter(for_others=False)
        yield Launch(
            argv=[python, "-I", str(HERE / "driver.py")], program=str(path), kill_all=False, cwd=scratch,
            env={"PATH": PATH, "HOME": scratch, "TMPDIR": scratch, "LANG": "C.UTF-8"},
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
