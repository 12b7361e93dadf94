"""Run locks: one run at a time writes a given output, so reports and records cannot mix.

:func:`run_lock` holds a lock on a primary output (``quality_summary.json``, the merged file, the
joined file) for a run's whole duration, the up-to-date check included:

* locally, an advisory ``flock`` on ``.<output name>.lock`` beside the output, holding the run id,
  command, pid, host and start time as JSON. The kernel drops the lock when its holder dies, so a
  lock file whose lock is free but whose holder never removed it is stale: it is taken over with
  a warning naming the dead run;
* on object stores, a lease object at the same place, created with a conditional write
  (``If-None-Match: *``) and holding an expiry that a background thread renews; an expired lease
  is taken over with a warning.

A second run on a locked output waits up to ``wait`` seconds (default ``GYMFLOW_LOCK_WAIT`` or 5)
and then fails with a one-line :class:`RunLockedError` naming the holder. Locks are re-entrant
within a process (aggregate runs the health check on its own output directory). Taking a lock
also removes the temp files killed runs left beside the output (:func:`storage.remove_stale_temps`).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from typing import Any

import orjson

from gymflow import storage, storage_faults, threads
from gymflow.errors import StorageError

__all__ = ["DEFAULT_LEASE_S", "Holder", "RunLockedError", "lock_path", "release_all", "run_lock"]

logger = logging.getLogger(__name__)

DEFAULT_WAIT_S = 5.0
DEFAULT_LEASE_S = 60.0
WAIT_ENV = "GYMFLOW_LOCK_WAIT"
_POLL_S = 0.1
RELEASE_WAIT_S = 3.0
_PARTS = re.compile(r"^\.(?P<name>.+)\.parts-[0-9a-f]{12}$")

Warn = Callable[[str], None]


class RunLockedError(StorageError):
    """Another live run holds the lock of the output; nothing was read or written."""


@dataclass(frozen=True)
class Holder:
    """Who holds (or held) a lock."""

    run_id: str
    command: str
    pid: int
    host: str
    started: str
    expires: float | None = None

    def describe(self) -> str:
        return f"run {self.run_id} ({self.command}, pid {self.pid} on {self.host}, started {self.started})"

    def to_bytes(self) -> bytes:
        return orjson.dumps(asdict(self)) + b"\n"

    @classmethod
    def parse(cls, data: bytes) -> Holder | None:
        try:
            raw = orjson.loads(data)
            return cls(
                str(raw["run_id"]),
                str(raw["command"]),
                int(raw["pid"]),
                str(raw["host"]),
                str(raw["started"]),
                None if raw.get("expires") is None else float(raw["expires"]),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return None


@dataclass
class _Held:
    holder: Holder
    path: str
    depth: int
    release: Callable[[], None]


_held: dict[str, _Held] = {}
_held_guard = threading.RLock()


def lock_path(output_url: str) -> str:
    """``.<output name>.lock`` beside ``output_url``."""
    return storage.join(storage.parent(output_url), f".{storage.name(output_url)}.lock")


def _default_wait() -> float:
    try:
        return max(0.0, float(os.environ.get(WAIT_ENV, DEFAULT_WAIT_S)))
    except ValueError:
        return DEFAULT_WAIT_S


def _warn_default(message: str) -> None:
    logger.warning(message)


def _refusal(output_url: str, holder: Holder | None, waited: float, path: str) -> RunLockedError:
    who = holder.describe() if holder is not None else "another run"
    return RunLockedError(
        f"{output_url}: {who} is writing these outputs (lock {path}); waited {waited:g} s. "
        "Run again when it has finished."
    )


@contextmanager
def run_lock(
    output_url: str,
    command: str,
    *,
    wait: float | None = None,
    lease: float = DEFAULT_LEASE_S,
    warn: Warn | None = None,
) -> Iterator[Holder]:
    """Hold the run lock of ``output_url`` for the ``with`` block (see the module docstring)."""
    warn = warn or _warn_default
    wait = _default_wait() if wait is None else wait
    path = lock_path(output_url)
    key = storage.to_uri(path)
    with _held_guard:
        held = _held.get(key)
        if held is not None:
            held.depth += 1
    if held is not None:
        try:
            yield held.holder
        finally:
            with _held_guard:
                held.depth -= 1
        return
    holder = Holder(
        run_id=uuid.uuid4().hex[:16],
        command=command,
        pid=os.getpid(),
        host=socket.gethostname(),
        started=_now(),
    )
    if storage.is_local(path):
        release = _acquire_local(output_url, path, holder, wait, warn)
    else:
        release = _acquire_remote(output_url, path, holder, wait, lease, warn)
    entry = _Held(holder, path, 1, release)
    with _held_guard:
        _held[key] = entry
    try:
        _clean_beside(output_url, warn)
        yield holder
    finally:
        with _held_guard:
            _held.pop(key, None)
        release()


def release_all() -> None:
    """Release every lock this process holds (the interrupt handler calls it before exiting)."""
    with _held_guard:
        entries = list(_held.values())
        _held.clear()
    for entry in entries:
        with suppress(Exception):
            entry.release()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _clean_beside(output_url: str, warn: Warn) -> None:
    """Temp files and join part folders that killed runs left beside the output we now own."""
    directory = storage.parent(output_url)
    if not storage.is_local(directory):
        return
    storage.remove_stale_temps(directory, warn)
    local = directory.removeprefix("file://")
    name = storage.name(output_url)
    with suppress(OSError):
        for entry in os.scandir(local):
            match = _PARTS.match(entry.name)
            if match is not None and match.group("name") == name and entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
                warn(f"removed part files of an interrupted run: {entry.path}")


# -- local: flock ----------------------------------------------------------------------------


def _acquire_local(output_url: str, path: str, holder: Holder, wait: float, warn: Warn) -> Callable[[], None]:
    # The lock file is the first thing a run writes beside its output: an output location that
    # cannot be written (read-only, full, not a directory...) is named here, in one line.
    with storage_faults.guard(output_url, "write", writing=True):
        return _take_local(output_url, path, holder, wait, warn)


def _take_local(output_url: str, path: str, holder: Holder, wait: float, warn: Warn) -> Callable[[], None]:
    local = path.removeprefix("file://")
    start = time.monotonic()
    while True:
        # An output in a directory that cannot hold files (/proc, read-only, a symlink loop) is
        # named in one line by the caller's guard.
        storage.make_dirs(os.path.dirname(os.path.abspath(local)))
        fd = os.open(local, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            refused = os.fstat(fd).st_ino
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise StorageError(f"{path}: cannot lock it: {exc}") from exc
            waited = time.monotonic() - start
            if waited >= wait:
                holder_now = _holder_soon(local)
                if holder_now is None and not _is_file(local, refused):
                    continue  # its holder ended (and removed it) as we looked: take it now
                raise _refusal(output_url, holder_now, round(waited, 1), path) from None
            time.sleep(min(_POLL_S, max(wait - waited, 0.01)))
            continue
        # The holder before us may have removed the file after we opened it: lock the one on disk.
        try:
            same = os.stat(local).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            os.close(fd)
            continue
        break
    previous = Holder.parse(os.pread(fd, 4096, 0))
    if previous is not None:
        warn(f"took over the lock of {previous.describe()}, which ended without releasing it (lock {path})")
    data = holder.to_bytes()
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    except BaseException:
        with suppress(OSError):
            os.unlink(local)  # ours: we hold its lock
        os.close(fd)
        raise

    def release() -> None:
        try:
            with suppress(FileNotFoundError):
                if os.stat(local).st_ino == os.fstat(fd).st_ino:
                    os.unlink(local)
        finally:
            os.close(fd)

    return release


def _holder_soon(local: str, within_s: float = 1.0) -> Holder | None:
    """Who holds a lock we were refused: a process writes itself into the file right after it
    takes the lock, so an empty file means it is about to (read again, briefly)."""
    deadline = time.monotonic() + within_s
    while (holder := _read_local(local)) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return holder


def _is_file(local: str, inode: int) -> bool:
    """Whether ``local`` is still the file of ``inode``."""
    try:
        return os.stat(local).st_ino == inode
    except FileNotFoundError:
        return False


def _read_local(local: str) -> Holder | None:
    try:
        with open(local, "rb") as handle:
            return Holder.parse(handle.read(4096))
    except OSError:
        return None


# -- object stores: a lease object -----------------------------------------------------------


def _acquire_remote(
    output_url: str, path: str, holder: Holder, wait: float, lease: float, warn: Warn
) -> Callable[[], None]:
    fs, key = storage.filesystem(path)
    start = time.monotonic()
    mine = Holder(**{**asdict(holder), "expires": time.time() + lease})
    while True:
        try:
            fs.pipe_file(key, mine.to_bytes(), mode="create", **storage.limit(fs, one_request=True))
            break
        except FileExistsError:
            pass
        except Exception as exc:  # noqa: BLE001 - any backend failure: one line naming the lock
            raise _lock_failure(path, exc) from exc
        try:
            exists, current = _read_remote(fs, key)
        except Exception as exc:  # noqa: BLE001 - as above
            raise _lock_failure(path, exc) from exc
        if not exists:
            continue  # released meanwhile
        if current is None or _lease_stale(current):
            who = current.describe() if current is not None else "an unreadable lease"
            warn(f"took over the stale lease of {who} (lock {path})")
            with suppress(Exception):
                fs.rm_file(key, **storage.limit(fs, one_request=True))
            continue
        waited = time.monotonic() - start
        if waited >= wait:
            raise _refusal(output_url, current, round(waited, 1), path)
        time.sleep(min(0.5, max(wait - waited, 0.05)))
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(lease / 3):
            renewed = Holder(**{**asdict(holder), "expires": time.time() + lease})
            try:
                _, current = _read_remote(fs, key)
                if current is None or current.run_id != holder.run_id:
                    warn(f"the run lock {path} was taken over by another run")
                    return
                fs.pipe_file(key, renewed.to_bytes(), **storage.limit(fs, one_request=True))
            except Exception as exc:  # noqa: BLE001 - renewal is best effort; expiry covers it
                logger.warning("cannot renew the run lock %s: %s", path, exc)

    threads.start(renew, name="gymflow-lease")

    def remove() -> None:
        with suppress(Exception):
            _, current = _read_remote(fs, key)
            if current is not None and current.run_id == holder.run_id:
                fs.rm_file(key, **storage.limit(fs, one_request=True))

    def release() -> None:
        # Bounded: a store that stopped answering must not hold the run up; the lease then
        # expires (or is seen as stale on this host) and the next run takes it over.
        stop.set()
        remover = threads.start(remove, name="gymflow-lease-release")
        remover.join(RELEASE_WAIT_S)

    return release


def _lock_failure(path: str, exc: BaseException) -> StorageError:
    reason = storage_faults.describe_error(exc, storage.timeout_s())
    return StorageError(f"{path}: cannot take the run lock: {reason}")


def _lease_stale(holder: Holder) -> bool:
    """Expired, or held by a process of this host that no longer runs."""
    if holder.expires is not None and holder.expires < time.time():
        return True
    if holder.host == socket.gethostname() and holder.pid != os.getpid():
        try:
            os.kill(holder.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
    return False


def _read_remote(fs: Any, key: str) -> tuple[bool, Holder | None]:
    """Whether the lease object exists, and its holder if it is readable."""
    try:
        fs.invalidate_cache(key)
        return True, Holder.parse(bytes(fs.cat_file(key, **storage.limit(fs, one_request=True))))
    except FileNotFoundError:
        return False, None
