"""Local scratch space that a killed run does not leave behind for good.

Every temporary file or directory gymflow makes outside its outputs (spilled rows, spooled
shards, upload staging, launched servers' logs) is named ``gymflow-<what>-<pid>-<random>`` in the
system's temporary directory. A run removes its own when it ends; one killed with ``kill -9``
cannot, so each new scratch entry first removes the entries of processes that no longer exist.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from gymflow.errors import StorageError
from gymflow.storage_faults import os_reason

__all__ = ["discard", "prefix", "scratch_dir", "scratch_file", "temporary_dir", "sweep"]

_ENTRY = re.compile(r"^gymflow-[a-z]+-(?P<pid>\d+)-")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def sweep(directory: str | None = None) -> list[str]:
    """Remove the scratch entries of processes that are gone; returns what was removed."""
    root = directory or tempfile.gettempdir()
    removed: list[str] = []
    with suppress(OSError):
        for name in os.listdir(root):
            match = _ENTRY.match(name)
            if match is None or _alive(int(match["pid"])):
                continue
            path = os.path.join(root, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with suppress(OSError):
                    os.unlink(path)
            removed.append(path)
    return removed


def prefix(what: str) -> str:
    """``gymflow-<what>-<pid>-``: the start of a scratch entry's name, which :func:`sweep` reads."""
    if not re.fullmatch("[a-z]+", what):  # the sweep must be able to read the pid back
        raise ValueError(f"scratch names are lowercase letters only, not {what!r}")
    return f"gymflow-{what}-{os.getpid()}-"


def scratch_dir(what: str) -> str:
    """A new directory ``gymflow-<what>-<pid>-...``; the caller removes it when done."""
    sweep()
    with _creating():
        return tempfile.mkdtemp(prefix=prefix(what))


def scratch_file(what: str, suffix: str = "") -> tuple[int, str]:
    """A new file ``gymflow-<what>-<pid>-...<suffix>``, as ``tempfile.mkstemp`` returns it."""
    sweep()
    with _creating():
        return tempfile.mkstemp(prefix=prefix(what), suffix=suffix)


@contextmanager
def _creating() -> Iterator[None]:
    """A temporary directory that cannot be written is one line naming it (and ``TMPDIR``)."""
    try:
        yield
    except OSError as exc:
        # gettempdir itself fails when no candidate directory is writable.
        root = tempfile.tempdir or os.environ.get("TMPDIR") or "the temporary directory"
        raise StorageError(
            f"{root}: cannot create scratch space in it: {os_reason(exc)} "
            "(set TMPDIR to a writable directory)"
        ) from exc


def discard(path: str) -> None:
    """Remove the scratch file ``path`` if it is still there (a finalizer of what owns it)."""
    with suppress(FileNotFoundError):
        os.unlink(path)


@contextmanager
def temporary_dir(what: str) -> Iterator[str]:
    """:func:`scratch_dir` removed when the block ends."""
    path = scratch_dir(what)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
