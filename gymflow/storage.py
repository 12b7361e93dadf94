"""The one front end to storage: local paths, ``file://``, ``s3://`` and ``memory://`` URLs.

Every command reads and writes through these functions, so a results directory on S3 behaves like
one on disk. Local paths take a fast path through ``os`` and stay rendered as the user gave them;
anything else goes through fsspec with the per-protocol options in force (:func:`using`: a run
sets them from its :class:`~gymflow.run_context.RunContext`; threads started through
:mod:`gymflow.threads` and the workers of :mod:`gymflow.parallel` inherit them).

Credentials are never hard-coded: without options, s3fs (through botocore) reads the usual
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION`` and ``AWS_ENDPOINT_URL``
environment variables (``AWS_ENDPOINT_URL`` is honoured by this botocore; a test checks it).

Every call to an object store ends within ``storage.timeout_s`` (:func:`timeout_s`), retries
included. Failures are raised as :class:`~gymflow.errors.InputError` (a file to read is missing)
or :class:`~gymflow.errors.StorageError` (anything else: an endpoint that did not answer, a
read-only or full file system, ...), naming the URL without credentials; how failures are bounded
and explained lives in :mod:`gymflow.storage_faults`.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import errno
import fcntl
import glob as _pyglob
import hashlib
import logging
import os
import re
import stat
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager, suppress
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar, cast

from gymflow import scratch, threads
from gymflow.errors import InputError, StorageError
from gymflow.frozen import FrozenDict
from gymflow.storage_faults import (
    URL_SCHEME,
    deadline,
    guard,
    scrub_url,
    timeout_of,
    with_timeouts,
)

if TYPE_CHECKING:
    import fsspec  # type: ignore[import-untyped]

logger = logging.getLogger(__name__)
R = TypeVar("R")

CHUNK_SIZE = 8 * 2**20
"""Bytes per range request when streaming a remote file (hashing, line iteration), and per block
when copying a file."""

LOCAL_CHUNK_SIZE = 2**20
"""Bytes per read when streaming a local file: as fast as larger reads, and each of a pool's
workers holds one chunk (or two, across a line that straddles them) at a time."""

REMOTE_BLOCK_SIZE = 16 * 2**20
"""Block size of files opened on object stores: few large requests instead of many small ones."""

_PREFETCH = 2
"""Range requests kept in flight when streaming from an object store."""

_LOCAL_PROTOCOLS = frozenset({"file", "local"})

_NO_OPTIONS: Mapping[str, Mapping[str, Any]] = FrozenDict()
_OPTIONS: contextvars.ContextVar[Mapping[str, Mapping[str, Any]]] = contextvars.ContextVar(
    "gymflow_storage_options", default=_NO_OPTIONS
)
"""The fsspec options in force in this context (a run's, set by :func:`using`)."""


# -- configuration ---------------------------------------------------------------------------


@contextmanager
def using(options: Mapping[str, Mapping[str, Any]]) -> Iterator[None]:
    """The fsspec options per protocol for the ``with`` block, e.g. ``{"s3": {"endpoint_url":
    ..., "key": ...}}``, in this context and the threads it starts through :mod:`gymflow.threads`
    (a run enters its :class:`~gymflow.run_context.RunContext`, which does this)."""
    token = _OPTIONS.set(_copy_options(options))
    try:
        yield
    finally:
        _OPTIONS.reset(token)


def current_options() -> dict[str, dict[str, Any]]:
    """A copy of the options in force (see :func:`using`)."""
    return _copy_options(_OPTIONS.get())


def timeout_s() -> float:
    """Seconds a storage operation may take, retries included (``storage.timeout_s``).

    Read from the options set by :func:`configure` (their
    :data:`~gymflow.storage_faults.SETTINGS_KEY` entry, set by
    :func:`~gymflow.storage_faults.with_timeout_s`), so it reaches pool workers and tasks with
    them. The one place storage reads its budget."""
    return timeout_of(current_options())


def _guard(url: str, action: str, *, writing: bool = False) -> contextlib.AbstractContextManager[None]:
    """:func:`~gymflow.storage_faults.guard` with the budget in force and the endpoint serving
    ``url`` (a silent endpoint is not waited on twice within the budget)."""
    if is_local(url):
        return guard(url, action, writing=writing)
    options = current_options()
    protocol = _protocol(url)
    endpoint = str(options.get(protocol, {}).get("endpoint_url") or os.environ.get("AWS_ENDPOINT_URL", ""))
    return guard(url, action, writing=writing, budget=timeout_s(), endpoint=endpoint)


def limit(fs: fsspec.AbstractFileSystem, nbytes: int = 0, *, one_request: bool = False) -> dict[str, float]:
    """Keyword arguments that bound one call of ``fs`` moving about ``nbytes`` by the budget, for
    code that calls a filesystem from :func:`filesystem` itself: ``fs.cat_file(p, **limit(fs))``;
    a call that makes ``one_request`` is bounded by its request timeouts
    (see :func:`~gymflow.storage_faults.deadline`)."""
    return deadline(fs, timeout_s(), nbytes, one_request=one_request)


def _copy_options(options: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    # Plain data is copied deeply; objects such as an aiobotocore session are shared, not cloned.
    return {
        str(protocol): {
            str(k): copy.deepcopy(v) if isinstance(v, dict | list) else v for k, v in values.items()
        }
        for protocol, values in options.items()
    }


# -- URLs ------------------------------------------------------------------------------------


def _protocol(url: str) -> str:
    match = URL_SCHEME.match(url)
    return match.group(1).lower() if match else "file"


def _local_path(url: str) -> str | None:
    """The OS path of a local path or ``file://`` URL, or None for any other URL."""
    match = URL_SCHEME.match(url)
    if match is None:
        return url
    if match.group(1).lower() in _LOCAL_PROTOCOLS:
        return url[match.end() :]
    return None


def is_local(url: str) -> bool:
    """Whether ``url`` is a local path or a ``file://`` URL."""
    return _local_path(url) is not None


def local_version(url: str) -> tuple[int, int] | None:
    """(size, modification time in ns) of a local file, which changes when its bytes are
    rewritten; ``None`` for a remote URL or a file that cannot be stat'ed."""
    local = _local_path(url)
    if local is None:
        return None
    try:
        stat = os.stat(local)
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


def filesystem(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem for ``url`` (with the configured options) and the stripped path.

    fsspec is imported here, on first use: a process that reads local files only (a pool worker)
    never loads it."""
    import fsspec
    from fsspec.core import url_to_fs  # type: ignore[import-untyped]

    protocol = _protocol(url)
    options: dict[str, Any] = {}
    if protocol not in _LOCAL_PROTOCOLS:
        try:
            cls = fsspec.get_filesystem_class(protocol)
        except (ImportError, ValueError) as exc:
            raise StorageError(f"{scrub_url(url)}: unsupported storage protocol {protocol!r}") from exc
        names = cls.protocol if isinstance(cls.protocol, tuple) else (cls.protocol,)
        configured = _OPTIONS.get()
        for name in (protocol, *names):
            if name in configured:
                options = dict(configured[name])
                break
    options, retries = with_timeouts(protocol, options, timeout_s())
    with guard(url, "open filesystem for"):  # no request yet: the call that follows is guarded
        fs, path = url_to_fs(url, **options)
    if retries is not None and hasattr(fs, "retries"):
        fs.retries = 1  # botocore retries (standard mode, with backoff): attempts do not multiply
    return fs, cast(str, path)


def join(base: str, *parts: str) -> str:
    """Join path components onto ``base``, keeping its form (local path or URL)."""
    local = _local_path(base)
    if local is not None and URL_SCHEME.match(base) is None:
        return os.path.join(base, *parts)
    result = base
    for part in parts:
        piece = part.strip("/")
        if piece:
            result = f"{result.rstrip('/')}/{piece}"
    return result


def resolve_under(base: str, path: str) -> str:
    """``path`` as given when it is absolute or a URL, else under ``base`` (local paths
    normalised the way ``pathlib`` does, e.g. ``runs/cli/`` + ``x`` -> ``runs/cli/x``)."""
    if "://" in path or os.path.isabs(path):
        return path
    if "://" in base:
        return join(base, path)
    return str(PurePath(base) / path)


def parent(url: str) -> str:
    """The directory (or prefix) containing ``url``; a bucket or root is its own parent."""
    match = URL_SCHEME.match(url)
    if match is None:
        return os.path.dirname(url.rstrip("/") or "/") or "."
    scheme, rest = url[: match.end()], url[match.end() :]
    stripped = rest.rstrip("/")
    if "/" not in stripped:
        return scheme + stripped
    head = stripped.rsplit("/", 1)[0]
    return scheme + (head or "/")


def name(url: str) -> str:
    """The last component of ``url`` (file name, or bucket name for a bare bucket)."""
    return url.rstrip("/").rsplit("/", 1)[-1]


def to_uri(url: str) -> str:
    """The URI to put in records: absolute ``file://`` URLs locally, never with credentials."""
    local = _local_path(url)
    if local is not None:
        return "file://" + os.path.abspath(local)
    return scrub_url(url)


# -- metadata --------------------------------------------------------------------------------


def _probe(url: str, local_check: Callable[[str], bool], method: str) -> bool:
    local = _local_path(url)
    if local is not None:
        return local_check(local)
    fs, path = filesystem(url)
    with _guard(url, "check"):
        # Another process may have written since this client last listed the prefix.
        fs.invalidate_cache(path)
        # fsspec's exists/isfile/isdir answer False on *any* failure (an endpoint that is down,
        # refused credentials): ask for the entry itself, so only "not found" means False.
        try:
            info = fs.info(path, **limit(fs))
        except FileNotFoundError:
            return False
        kind = info.get("type")
        if method == "isfile":
            return bool(kind == "file")
        if method == "isdir":
            return bool(kind == "directory")
        return True


def exists(url: str) -> bool:
    """Whether a file or directory (on S3: object, prefix or bucket) exists at ``url``."""
    return _probe(url, os.path.exists, "exists")


def isfile(url: str) -> bool:
    """Whether ``url`` is a regular file (on S3: an object)."""
    return _probe(url, os.path.isfile, "isfile")


def isdir(url: str) -> bool:
    """Whether ``url`` is a directory (on S3: an existing bucket, or a prefix with objects)."""
    return _probe(url, os.path.isdir, "isdir")


def size(url: str) -> int:
    """The size of the file at ``url`` in bytes."""
    local = _local_path(url)
    with _guard(url, "stat"):
        if local is not None:
            return os.path.getsize(local)
        fs, path = filesystem(url)
        fs.invalidate_cache(path)
        return int(fs.size(path, **limit(fs)))


def glob(pattern: str) -> list[str]:
    """Sorted matches of ``pattern`` (``*``, ``?``, ``[..]``, ``**``), in the pattern's form."""
    match = URL_SCHEME.match(pattern)
    local = _local_path(pattern)
    if local is not None:
        prefix = pattern[: match.end()] if match else ""
        return sorted(prefix + p for p in _pyglob.glob(local, recursive=True))
    assert match is not None
    scheme, rest = pattern[: match.end()], pattern[match.end() :]
    fs, path = filesystem(pattern)
    with _guard(pattern, "list"):
        fs.invalidate_cache()
        found = [str(p) for p in fs.glob(path, **limit(fs))]
    if not rest.startswith("/"):
        found = [p.lstrip("/") for p in found]
    return sorted(scheme + p for p in found)


# -- reading ---------------------------------------------------------------------------------


_KINDS = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
}


def _open_regular(url: str, local: str, buffering: int) -> BinaryIO:
    """Open a local file for reading, refusing anything but a regular file (a FIFO would block)."""
    fd = os.open(local, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
            raise InputError(
                f"{scrub_url(url)}: is {kind}, not a regular file; gymflow reads regular files only"
            )
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        handle: BinaryIO = os.fdopen(fd, "rb", buffering=buffering)
        return handle
    except BaseException:
        os.close(fd)
        raise


def open_read(url: str) -> BinaryIO:
    """Open ``url`` for buffered binary reading; use it as a context manager.

    A local path that is not a regular file (FIFO, device, socket, directory) is an InputError.
    """
    local = _local_path(url)
    with _guard(url, "open"):
        if local is not None:
            return _open_regular(url, local, 2**20)
        fs, path = filesystem(url)
        known: dict[str, int] = {}
        if bound := limit(fs):
            # The size is looked up within the budget; each block read after it is one request,
            # bounded by the request timeouts of the budget.
            fs.invalidate_cache(path)
            known["size"] = int(fs.info(path, **bound)["size"])
        return cast(
            BinaryIO, fs.open(path, "rb", block_size=REMOTE_BLOCK_SIZE, cache_type="readahead", **known)
        )


def read_range(url: str, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of ``url`` (fewer if the file ends first)."""
    if start < 0 or end < start:
        raise ValueError(f"invalid byte range [{start}, {end}) for {scrub_url(url)}")
    if end == start:
        return b""
    local = _local_path(url)
    with _guard(url, "read"):
        if local is not None:
            with _open_regular(url, local, 0) as f:
                f.seek(start)
                return _read_exactly(f, end - start)
        fs, path = filesystem(url)
        return bytes(fs.cat_file(path, start=start, end=end, **limit(fs, end - start)))


def _read_exactly(f: BinaryIO, count: int) -> bytes:
    parts: list[bytes] = []
    while count > 0:
        data = f.read(count)
        if not data:
            break
        parts.append(data)
        count -= len(data)
    return b"".join(parts)


def _iter_chunks(url: str, start: int = 0) -> Iterator[bytes]:
    """The bytes of ``url`` from ``start`` on, in chunks of :data:`LOCAL_CHUNK_SIZE` (local) or
    :data:`CHUNK_SIZE` (remote)."""
    local = _local_path(url)
    if local is not None:
        with _guard(url, "read"), _open_regular(url, local, 0) as f:
            f.seek(start)
            while chunk := f.read(LOCAL_CHUNK_SIZE):
                yield chunk
        return
    fs, path = filesystem(url)
    with _guard(url, "read"):
        fs.invalidate_cache(path)
        total = int(fs.size(path, **limit(fs)))
    ranges = [(s, min(s + CHUNK_SIZE, total)) for s in range(start, total, CHUNK_SIZE)]

    def fetch(byte_range: tuple[int, int]) -> bytes:
        start, end = byte_range
        return bytes(fs.cat_file(path, start=start, end=end, **limit(fs, end - start)))

    # Keep a few range requests in flight so the network overlaps the caller's work.
    pool = threads.executor(_PREFETCH, "gymflow-read")
    pending: list[Future[bytes]] = []
    try:
        for index in range(len(ranges)):
            while len(pending) < _PREFETCH and index + len(pending) < len(ranges):
                pending.append(pool.submit(fetch, ranges[index + len(pending)]))
            with _guard(url, "read"):
                chunk = pending.pop(0).result()
            yield chunk
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def iter_lines(url: str, start: int = 0, end: int | None = None) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, line)`` for every line that starts in ``[start, end)``.

    A line starts at offset 0 or just after a ``\\n``; it includes its trailing ``\\n`` when it has
    one, and is yielded whole even when it runs past ``end``. Ranges that tile a file therefore
    yield every line exactly once. The file is streamed in chunks, never loaded whole.
    """
    if start < 0:
        raise ValueError(f"invalid start offset {start} for {scrub_url(url)}")
    if end is not None and end <= start:
        return
    # Read from the byte before ``start``: a line starts at ``start`` only if that byte is ``\n``.
    offset = max(start - 1, 0)
    skipping = start > 0
    line_start = offset
    pending: list[bytes] = []
    for chunk in _iter_chunks(url, offset):
        i = 0
        if skipping:
            newline = chunk.find(b"\n")
            if newline < 0:
                offset += len(chunk)
                continue
            skipping = False
            i = newline + 1
            line_start = offset + i
            if end is not None and line_start >= end:
                return
        while True:
            newline = chunk.find(b"\n", i)
            if newline < 0:
                if i < len(chunk):
                    pending.append(chunk[i:])
                break
            if pending:
                pending.append(chunk[i : newline + 1])
                line = b"".join(pending)
                pending = []
            else:
                line = chunk[i : newline + 1]
            yield line_start, line
            i = newline + 1
            line_start = offset + i
            if end is not None and line_start >= end:
                return
        offset += len(chunk)
    if pending:
        yield line_start, b"".join(pending)


def _next_line_start(url: str, position: int, total: int) -> int:
    """The smallest line start at or after ``position`` (``total`` if there is none)."""
    if position <= 0:
        return 0
    cursor = position - 1
    window = 64 * 2**10
    while cursor < total:
        data = read_range(url, cursor, min(cursor + window, total))
        newline = data.find(b"\n")
        if newline >= 0:
            return min(cursor + newline + 1, total)
        cursor += len(data)
        window = min(window * 4, CHUNK_SIZE)
    return total


def split_ranges(url: str, parts: int) -> list[tuple[int, int]]:
    """Split ``url`` into about ``parts`` byte ranges whose boundaries are line starts.

    The ranges tile ``[0, size)``; with :func:`iter_lines` semantics each line belongs to exactly
    one range. Long lines can merge ranges, so fewer may come back; an empty file gives
    ``[(0, 0)]``.
    """
    if parts < 1:
        raise ValueError(f"parts must be at least 1, not {parts}")
    total = size(url)
    bounds = [0]
    for index in range(1, parts):
        target = total * index // parts
        if target <= bounds[-1]:
            continue
        boundary = _next_line_start(url, target, total)
        if bounds[-1] < boundary < total:
            bounds.append(boundary)
    bounds.append(total)
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def sha256(url: str) -> tuple[str, int]:
    """The lowercase hex SHA-256 of the bytes at ``url`` and their count, streamed (a local file
    read into one buffer, not a new bytes object per chunk: 0.52 -> 0.47 s for 660 MB)."""
    digest = hashlib.sha256()
    count = 0
    local = _local_path(url)
    if local is not None:
        buffer = bytearray(LOCAL_CHUNK_SIZE)
        view = memoryview(buffer)
        with _guard(url, "read"), _open_regular(url, local, 0) as f:
            while size := os.readv(f.fileno(), [buffer]):
                digest.update(view[:size])
                count += size
        return digest.hexdigest(), count
    for chunk in _iter_chunks(url):
        digest.update(chunk)
        count += len(chunk)
    return digest.hexdigest(), count


# -- writing ---------------------------------------------------------------------------------


def _fsync_dir(directory: str) -> None:
    with suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


TEMP_PATTERN = re.compile(r"^\.(?P<name>.+)\.[0-9a-f]{12}\.tmp$")
"""Names of gymflow's own temporary files: ``.<name>.<12 hex>.tmp`` beside the file they become."""

STALE_TEMP_SECONDS = 24 * 3600.0
"""A temp file this old is stale even if it cannot be locked (e.g. on a filesystem without flock)."""

_write_observers: list[Callable[[str], None]] = []


def add_write_observer(observer: Callable[[str], None]) -> Callable[[], None]:
    """Call ``observer(url)`` after each file this process writes completely; returns a remover.

    The CLI uses it to say what an interrupted run kept.
    """
    _write_observers.append(observer)
    return lambda: _write_observers.remove(observer) if observer in _write_observers else None


def _written(url: str) -> None:
    for observer in list(_write_observers):
        observer(url)


class _Hashing:
    """A writer that hashes and counts the bytes that pass through it: the digest of what was
    written, never of what a later read finds."""

    def __init__(self, out: BinaryIO | None = None) -> None:
        self.out = out
        self.hash = hashlib.sha256()
        self.count = 0

    def chunks(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        update = self.hash.update
        for chunk in chunks:
            update(chunk)
            self.count += len(chunk)
            yield chunk

    def result(self) -> tuple[str, int]:
        return self.hash.hexdigest(), self.count


def make_dirs(directory: str) -> None:
    """``os.makedirs(directory, exist_ok=True)``, failing with the real reason when a component is
    not a directory (``os.makedirs`` says ``File exists`` for a symlink loop or a file)."""
    try:
        os.makedirs(directory, exist_ok=True)
    except FileExistsError:
        os.stat(directory)  # a symlink loop (ELOOP), a dangling link (ENOENT)...
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), directory) from None


class _Appender:
    """A local file opened for appending whose failures (a full disk, a file system turned
    read-only) are :class:`~gymflow.errors.StorageError` lines naming it, like every write here."""

    def __init__(self, path: str) -> None:
        self.path = path
        with _guard(path, "write", writing=True):
            make_dirs(os.path.dirname(os.path.abspath(path)))
            self._file = open(path, "ab")  # noqa: SIM115 - closed by close()
        # A run that failed on another file may never close this one: closed, quietly, when dropped.
        weakref.finalize(self, _close_quietly, self._file)

    def write(self, data: bytes) -> int:
        with _guard(self.path, "write", writing=True):
            return self._file.write(data)

    def flush(self) -> None:
        with _guard(self.path, "write", writing=True):
            self._file.flush()

    def fileno(self) -> int:
        return self._file.fileno()

    def tell(self) -> int:
        return self._file.tell()

    @property
    def closed(self) -> bool:
        return self._file.closed

    def close(self) -> None:
        """Close the file; a failure to write what was buffered is raised (once: the file is
        closed either way)."""
        if self._file.closed:
            return
        with _guard(self.path, "write", writing=True):
            self._file.close()

    def __enter__(self) -> _Appender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close_quietly(handle: BinaryIO) -> None:
    with suppress(OSError):
        handle.close()


def open_append(path: str) -> BinaryIO:
    """Open the local file ``path`` for appending (created with its directories if missing); every
    failure to write it is a one-line :class:`~gymflow.errors.StorageError` naming ``path``."""
    return cast(BinaryIO, _Appender(path))


def _write_local_atomic(path: str, write: Callable[[BinaryIO], None], durable: bool = True) -> None:
    """Write through ``write`` to a temp file beside ``path``, fsync it (if ``durable``), then
    rename it over.

    The temp file is ``flock``-ed while it is written, so :func:`remove_stale_temps` can tell a
    live writer's file from one left by a killed process. It is renamed before it is closed.
    """
    directory = os.path.dirname(os.path.abspath(path))
    make_dirs(directory)
    temp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex[:12]}.tmp")
    # os.open with 0o666 lets the umask decide the mode, as for any newly created file.
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        with suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with os.fdopen(fd, "wb", buffering=2**20, closefd=False) as f:
            write(f)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    finally:
        os.close(fd)
    if durable:
        _fsync_dir(directory)


def write_atomic(url: str, data: bytes) -> tuple[str, int]:
    """Replace ``url`` with ``data`` all at once: readers see the old or the new bytes, never a mix.

    Returns the SHA-256 (lowercase hex) and size of the bytes written.
    """
    local = _local_path(url)
    with _guard(url, "write", writing=True):
        if local is not None:
            _write_local_atomic(local, lambda f: f.writelines((data,)))
        else:
            fs, path = filesystem(url)
            fs.pipe_file(path, data, **limit(fs, len(data)))
    logger.debug("wrote %d bytes to %s", len(data), scrub_url(url))
    _written(url)
    return hashlib.sha256(data).hexdigest(), len(data)


def write_atomic_lines(url: str, chunks: Iterable[bytes]) -> tuple[str, int]:
    """Like :func:`write_atomic`, streaming ``chunks``; if they raise, ``url`` is left untouched.

    Returns the SHA-256 and size of the bytes written, hashed while writing.
    """
    local = _local_path(url)
    hashing = _Hashing()
    with _guard(url, "write", writing=True):
        if local is not None:
            _write_local_atomic(local, lambda f: f.writelines(hashing.chunks(chunks)))
        else:
            # Stage on local disk, then upload once: object stores have no rename, and a single
            # put (multipart for big files) only becomes visible when complete.
            with scratch.temporary_dir("upload") as staging:
                temp = os.path.join(staging, "data")
                with open(temp, "wb", buffering=2**20) as f:
                    f.writelines(hashing.chunks(chunks))
                fs, path = filesystem(url)
                fs.put_file(temp, path, **limit(fs, hashing.count))
    logger.debug("wrote %s", scrub_url(url))
    _written(url)
    return hashing.result()


def write_scratch_local(url: str, chunks: Iterable[bytes]) -> None:
    """Write ``chunks`` to the local ``url`` atomically, neither hashed nor fsync-ed: for an
    intermediate file (a join's part) whose bytes a later step hashes as it writes them, durably,
    into the output (a crash leaves the old output, never half a file)."""
    local = _local_path(url)
    if local is None:
        raise ValueError(f"not a local path: {scrub_url(url)}")
    with _guard(url, "write", writing=True):
        _write_local_atomic(local, lambda f: f.writelines(chunks), durable=False)
    _written(url)


def write_atomic_local(url: str, write: Callable[[int], R]) -> R:
    """Like :func:`write_atomic_lines` for a local ``url``: ``write`` gets the descriptor of the
    temporary file (positioned at 0; it writes with ``os.write`` or :func:`copy_range`) and returns
    what this returns (the digest it computed). If it raises, ``url`` is left untouched."""
    local = _local_path(url)
    if local is None:
        raise ValueError(f"not a local path: {scrub_url(url)}")
    result: list[R] = []
    with _guard(url, "write", writing=True):
        _write_local_atomic(local, lambda f: result.append(write(f.fileno())))
    logger.debug("wrote %s", scrub_url(url))
    _written(url)
    return result[0]


def write_all(target: int, data: bytes | memoryview) -> None:
    """Write all of ``data`` to the file descriptor ``target`` (``os.write`` may write less)."""
    with memoryview(data) as view:
        while view:
            view = view[os.write(target, view) :]


_COPY_ERRORS = frozenset({errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EBADF})
_copy_methods: list[str] = ["copy_file_range", "sendfile"]
"""Kernel copies still believed to work here (one that fails with an error of
``_COPY_ERRORS`` is dropped for the rest of the process)."""


def copy_range(source: int, target: int, offset: int, length: int) -> None:
    """Append ``length`` bytes of the file ``source`` from ``offset`` to ``target`` (at its file
    position), copied by the kernel (``copy_file_range``, else ``sendfile``) where it can, else
    through a buffer. Raises :class:`EOFError` if ``source`` ends first."""
    while length > 0:
        method = _copy_methods[0] if _copy_methods else None
        try:
            if method == "copy_file_range":
                count = os.copy_file_range(source, target, length, offset)
            elif method == "sendfile":
                count = os.sendfile(target, source, offset, length)
            else:
                data = os.pread(source, min(length, CHUNK_SIZE), offset)
                count = len(data)
                write_all(target, data)
        except OSError as exc:
            if method is None or exc.errno not in _COPY_ERRORS:
                raise
            with suppress(ValueError):
                _copy_methods.remove(method)
            continue
        if count == 0:
            raise EOFError(f"source ended {length} byte(s) short")
        offset += count
        length -= count


def remove(url: str) -> None:
    """Delete the file at ``url``; a failure (a directory, a read-only location...) is a one-line
    :class:`~gymflow.errors.StorageError` naming it."""
    local = _local_path(url)
    with _guard(url, "delete", writing=True):
        if local is not None:
            os.remove(local)
            return
        fs, path = filesystem(url)
        fs.rm_file(path, **limit(fs))


def remove_stale_temps(directory: str, warn: Callable[[str], None] | None = None) -> list[str]:
    """Delete gymflow's temp files (``.<name>.<hex>.tmp``) in a local ``directory`` whose writer
    is gone (their ``flock`` is free) or that are older than :data:`STALE_TEMP_SECONDS`.

    A concurrent writer's live temp file is locked and left alone. Returns the paths removed;
    object stores have no temp files (nothing to do there).
    """
    local = _local_path(directory)
    if local is None or not os.path.isdir(local):
        return []
    removed: list[str] = []
    now = time.time()
    for entry in os.scandir(local):
        if TEMP_PATTERN.match(entry.name) is None or not entry.is_file(follow_symlinks=False):
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                if now - os.fstat(fd).st_mtime < STALE_TEMP_SECONDS:
                    continue  # a live writer holds it
            os.unlink(entry.path)
            removed.append(entry.path)
        except OSError:
            continue
        finally:
            os.close(fd)
    if removed and warn is not None:
        warn(f"removed {len(removed)} stale temporary file(s) left by an interrupted run in {directory}")
    return removed


def line_number_at(url: str, offset: int) -> int:
    """The 1-based number of the line that starts at byte ``offset`` (newlines before it + 1)."""
    count = 0
    seen = 0
    for chunk in _iter_chunks(url):
        if seen + len(chunk) >= offset:
            return count + chunk.count(b"\n", 0, offset - seen) + 1
        count += chunk.count(b"\n")
        seen += len(chunk)
    return count + 1
