"""Joining a rollouts file: its lines, byte ranges, part files, cache key and provenance.

Both ways of running a join are built from these pieces: the direct path
(:mod:`gymflow.join._direct`) streams lines through :func:`join_lines` and writes the output
through a temporary file renamed into place; the Prefect flow joins each byte range into a part
file (:func:`join_range`), then :func:`concatenate_parts` and :func:`finish`.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final

import orjson

from gymflow import provenance, storage
from gymflow._json_agreement import msgspec_agrees
from gymflow.collector import paused_gc
from gymflow.errors import GymflowError, InputError
from gymflow.join._capture_store import JSONL_SUFFIX, MARKER_SUFFIX, CaptureStore, read_local
from gymflow.join._read_files import ReadFiles
from gymflow.join._row import join_row_outcome
from gymflow.join._settings import COMMAND, JoinSettings
from gymflow.join._stats import JoinStats
from gymflow.jsonline import LineError, dumps_exact, loads_exact
from gymflow.parallel import full_waves
from gymflow.run_context import RunContext
from gymflow.storage_faults import guard

__all__ = [
    "cache_key",
    "capture_listing",
    "concatenate_parts",
    "finish",
    "hash_captures",
    "join_lines",
    "join_range",
    "missing_capture_warning",
    "PartAppender",
    "part_urls",
    "plan_ranges",
    "remove_parts",
]

logger = logging.getLogger(__name__)


def _parse_row(line: bytes, where: Callable[[], str]) -> tuple[dict[str, Any], bool]:
    """The row object of a line, read exactly, and whether it needs the json module to be written
    back (integers beyond 64 bits). ``where()`` is ``<file>:<line>`` (asked only for an error)."""
    try:
        value, exact = loads_exact(line)
    except LineError as exc:
        raise InputError.at(
            where(), None, exc.field, f"not a JSON object ({exc.message}); nothing was written"
        ) from None
    if not isinstance(value, dict):
        raise InputError(f"{where()}: not a JSON object ({type(value).__name__}); nothing was written")
    return value, exact


def _dump(row: dict[str, Any], where: Callable[[], str]) -> bytes:
    try:
        return dumps_exact(row) + b"\n"
    except LineError as exc:
        raise InputError.at(where(), None, exc.field, f"{exc.message}; nothing was written") from None


class _Lines:
    """Line numbers of the lines of a byte range, counted only once one is needed (errors)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.first: int | None = None
        self.base: int | None = None
        self.seen = 0

    def advance(self, offset: int) -> None:
        if self.first is None:
            self.first = offset
        self.seen += 1

    def where(self) -> str:
        if self.base is None:
            self.base = storage.line_number_at(self.source, self.first or 0) if self.first else 1
        return f"{self.source}:{self.base + self.seen - 1}"


def join_lines(
    lines: Iterable[tuple[int, bytes]],
    store: CaptureStore | None,
    stats: JoinStats,
    *,
    perf: bool = True,
    source: str = "rollouts",
) -> Iterator[bytes]:
    """Join ``(offset, line)`` pairs (consecutive lines of ``source``) into output lines; blank
    lines are dropped.

    A line that is not a JSON object, or not one gymflow can write back unchanged, raises
    :class:`~gymflow.errors.InputError` naming file, line and field (the caller writes nothing).
    A row error writes the input line unchanged.
    """
    numbers = _Lines(source)
    for offset, line in lines:
        numbers.advance(offset)
        exact = False
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            text = line.strip(_JSON_SPACE)
            if not text:
                continue
            row, exact = _parse_row(text, numbers.where)
        else:
            # orjson makes an integer beyond 64 bits a float: the C check finds one (with a false
            # "yes" for a deeper line than it vouches for), and the exact reading keeps it whole
            if type(row) is not dict or not msgspec_agrees(line):
                row, exact = _parse_row(line.strip(_JSON_SPACE), numbers.where)
        outcome = join_row_outcome(row, store, perf=perf)
        if outcome.error is not None:
            stats.add(outcome, numbers.where())
            yield line.strip() + b"\n"
            continue
        stats.add(outcome, "")
        if not exact:
            try:
                yield orjson.dumps(outcome.row, option=orjson.OPT_APPEND_NEWLINE)
                continue
            except TypeError:
                pass
        yield _dump(outcome.row, numbers.where)
    if store is not None:
        stats.files_read.extend(store.files_read)
        store.files_read.clear()


_JSON_SPACE = b" \t\n\r"


def _store(settings: JoinSettings) -> CaptureStore | None:
    return None if settings.capture_dir is None else CaptureStore(settings.capture_dir)


def missing_capture_warning(settings: JoinSettings) -> list[str]:
    """The spec's warning for a capture directory that does not exist (it is then read as empty).

    Returned, not logged: the CLI prints each warning of the result once."""
    if settings.capture_dir is None:
        return []
    store = CaptureStore(settings.capture_dir)
    store.list_names()
    if not store.missing:
        return []
    message = (
        f"capture directory {settings.capture_dir} does not exist; treating it as empty "
        "(every row gets model_call_capture_no_records)"
    )
    return [message]


BYTES_PER_RANGE: Final = 32 * 2**20
MAX_RANGES: Final = 256


def plan_ranges(settings: JoinSettings, workers: int) -> list[tuple[int, int]]:
    """Byte ranges of the rollouts file: about 32 MiB each, a multiple of the workers (at least one
    each), at most 256.

    (More, smaller ranges balance the workers better, but each lists the capture directory and
    adds a part file: four per worker cost a 20,000-row join 0.6 s more CPU than they saved.)"""
    total = storage.size(settings.rollouts)
    parts = max(workers, min(MAX_RANGES, -(-total // BYTES_PER_RANGE)), 1)
    return storage.split_ranges(settings.rollouts, full_waves(parts, workers, MAX_RANGES))


def join_range(settings: JoinSettings, start: int, end: int, part_url: str) -> JoinStats:
    """Join the rows starting in bytes ``[start, end)`` of the rollouts file into ``part_url``."""
    stats = JoinStats()
    store = _store(settings)
    lines = storage.iter_lines(settings.rollouts, start, end)
    joined = join_lines(lines, store, stats, perf=settings.perf, source=settings.rollouts)
    with paused_gc():  # the write consumes ``joined``: the whole range is joined in here
        if settings.output != part_url and storage.is_local(part_url):
            storage.write_scratch_local(part_url, joined)  # concatenate_parts hashes it
        else:
            storage.write_atomic_lines(part_url, joined)
    return stats


def part_urls(settings: JoinSettings, count: int) -> list[str]:
    """Temporary part files beside the output, one per byte range."""
    folder = f".{storage.name(settings.output)}.parts-{uuid.uuid4().hex[:12]}"
    base = storage.join(storage.parent(settings.output), folder)
    return [storage.join(base, f"{i:05d}.jsonl") for i in range(count)]


def remove_parts(urls: Iterable[str]) -> None:
    """Delete part files (those that exist) and their folder once empty."""
    for url in urls:
        try:
            if storage.is_local(url):
                path = url.removeprefix("file://")
                if os.path.exists(path):
                    os.unlink(path)
                parent = os.path.dirname(path)
                if os.path.isdir(parent) and not os.listdir(parent):
                    os.rmdir(parent)
            else:
                fs, path = storage.filesystem(url)
                if fs.exists(path):
                    fs.rm_file(path)
        except OSError as exc:  # pragma: no cover - leftovers are harmless, and named
            logger.warning("could not remove part file %s: %s", url, exc)


def concatenate_parts(settings: JoinSettings, parts: list[str]) -> provenance.FileDigest:
    """Write the parts, in order, to the output atomically; remove them; return the output digest."""

    if storage.is_local(settings.output) and all(storage.is_local(part) for part in parts):
        sha, size = storage.write_atomic_local(settings.output, lambda fd: _copy_parts(parts, fd))
    else:

        def chunks() -> Iterator[bytes]:
            for part in parts:
                with storage.open_read(part) as f:
                    while chunk := f.read(storage.CHUNK_SIZE):
                        yield chunk

        sha, size = storage.write_atomic_lines(settings.output, chunks())
    remove_parts(parts)
    return provenance.FileDigest(storage.to_uri(settings.output), sha, size)


def _copy_parts(parts: list[str], target: int) -> tuple[str, int]:
    """Append the local ``parts`` to the file ``target``; the SHA-256 and size of what was appended."""
    appender = PartAppender(target)
    for part in parts:
        appender.append(part, remove=False)
    return appender.result()


class PartAppender:
    """Appends local part files, in order, to the open file ``target`` (copied by the kernel),
    hashing what it appends through one reused buffer: the output's digest without reading the
    output back. Parts can be appended as they are finished, while later ones are still joined."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.digest = hashlib.sha256()
        self.size = 0
        self._buffer = bytearray(storage.LOCAL_CHUNK_SIZE)

    def append(self, part: str, *, remove: bool = True) -> None:
        """Append the part file ``part`` (then delete it, with ``remove``)."""
        view = memoryview(self._buffer)
        path = part.removeprefix("file://")
        with guard(part, "read"), open(path, "rb", buffering=0) as f:
            size = 0
            while count := f.readinto(self._buffer):
                self.digest.update(view[:count])
                size += count
            storage.copy_range(f.fileno(), self.target, 0, size)
        self.size += size
        if remove:
            os.unlink(path)

    def result(self) -> tuple[str, int]:
        """SHA-256 and size of everything appended."""
        return self.digest.hexdigest(), self.size


def capture_listing(settings: JoinSettings, read: Iterable[str] = ()) -> Iterator[tuple[str, str]]:
    """``(record URI, readable URL)`` of every capture file and marker in the directory whose URI
    is not in ``read`` (URIs in sorted order: the files a join read), sorted by name, made one at
    a time (a store may hold a file per rollout)."""
    if settings.capture_dir is None:
        return
    store = CaptureStore(settings.capture_dir)
    base = store.uri("")
    skipped = iter(read)
    pending = next(skipped, None)
    for name in sorted(store.list_names() or ()):
        uri = base + name  # names sort as their URIs do: one directory, one base
        while pending is not None and pending < uri:
            pending = next(skipped, None)
        if pending != uri:
            yield uri, store.url(name)


def hash_captures(entries: Sequence[tuple[str, str]]) -> list[provenance.FileDigest]:
    """The digests of listed capture entries (``capture_listing``), in their order."""
    return [_listed_digest(uri, url) for uri, url in entries]


def _capture_role(uri: str) -> str:
    name = storage.name(uri)
    return f"capture:{name}" if name.endswith((JSONL_SUFFIX, MARKER_SUFFIX)) else "capture"


def cache_key(settings: JoinSettings, rollouts_sha: str, capture: Iterable[provenance.FileDigest]) -> str:
    """The cache key: rollouts bytes, every capture file of the directory (``capture``, sorted by
    URI, each once), parameters; hashed as the digests come."""
    pairs = ((_capture_role(d.uri), d.sha256) for d in capture)  # "capture..." sorts before "rollouts"
    inputs = itertools.chain(pairs, [("rollouts", rollouts_sha)])
    return provenance.cache_key_of_sorted(COMMAND, settings.parameters(), inputs)


def _listed_digest(uri: str, url: str) -> provenance.FileDigest:
    """The digest of a listed capture entry; one that cannot be read (a directory named like a
    capture file, a FIFO, a permission problem) counts as ``unreadable`` instead of stopping the
    join: a row that names it gets the ``model_call_capture_unreadable`` gap, others ignore it.

    A local file is read whole in one go (capture files are many and small); any problem is left
    to :func:`provenance.digest`, which names it."""
    if storage.is_local(url):
        try:
            data = read_local(url.removeprefix("file://"))
        except OSError:
            pass
        else:
            return provenance.FileDigest(uri, hashlib.sha256(data).hexdigest(), len(data))
    try:
        return provenance.digest(url)
    except GymflowError as exc:
        logger.warning("capture store entry %s cannot be read (%s); ignored", uri, exc)
        return provenance.FileDigest(uri, "unreadable", 0)


def current_key(settings: JoinSettings) -> str:
    """Hash the inputs as they are now and return their cache key (for the up-to-date check)."""
    rollouts_sha, _ = storage.sha256(settings.rollouts)
    listed = capture_listing(settings)
    return cache_key(settings, rollouts_sha, (_listed_digest(uri, url) for uri, url in listed))


def finish(
    settings: JoinSettings,
    rollouts: provenance.FileDigest,
    output: provenance.FileDigest,
    read: ReadFiles,
    unread: Sequence[provenance.FileDigest],
    ctx: RunContext,
    started_at: str,
) -> str:
    """Write the provenance record (last, after the output); return its URL.

    Inputs: the rollouts file and every capture file ``read`` (sorted); ``unread`` (the capture
    files in the directory that no row read, in name order) count for the cache key only.
    """
    capture = heapq.merge(read, unread, key=lambda d: d.uri)
    record = provenance.build_record(
        command=COMMAND,
        cache_key=cache_key(settings, rollouts.sha256, capture),
        inputs=[rollouts],
        outputs=[output],
        parameters=settings.record_parameters(),
        orchestrator=ctx.orchestrator,
        config=ctx.config,
        started_at=started_at,
        finished_at=provenance.timestamp(),
    )
    url = provenance.record_path(settings.output)
    provenance.write_record(url, record, more_inputs=read)
    return url
