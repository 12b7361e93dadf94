"""The CaptureStore reader: ``<id>.capture.jsonl`` files and ``<id>.capture.incomplete`` markers.

A store is a flat directory on any fsspec storage (evidence.md §2). The directory is listed once,
so deciding whether an id has a file or a marker costs no request per rollout on S3; the JSONL of
an id is read whole (one request), hashed as it is read (the provenance record lists it), decoded
as strict UTF-8 and split into lines as Python's text mode does. A line that is not JSON, not an
object, or fails record building is *invalid* but still consumes a ``call_index``. Any failure to
read means no calls and the gap ``model_call_capture_unreadable``.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import stat
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import orjson

from gymflow import provenance, storage
from gymflow.errors import GymflowError
from gymflow.join._call_records import build_record

__all__ = [
    "JSONL_SUFFIX",
    "MARKER_SUFFIX",
    "CaptureRead",
    "CaptureSource",
    "CaptureStore",
    "FileRead",
    "parse_capture",
    "read_local",
]

logger = logging.getLogger(__name__)

JSONL_SUFFIX: Final = ".capture.jsonl"
MARKER_SUFFIX: Final = ".capture.incomplete"

Obj = dict[str, Any]


FileRead = provenance.FileDigest
"""A capture file the join read: record URI, SHA-256 and size of the bytes it used (as the
provenance record lists it, so the record is built from them without a copy)."""


@dataclass(frozen=True)
class CaptureRead:
    """What the store holds for one rollout id."""

    exists: bool
    records: list[Obj] = field(default_factory=list)
    invalid: int = 0
    incomplete: bool = False
    unreadable: bool = False


class CaptureSource(Protocol):
    """Anything that can answer for a rollout id; :class:`CaptureStore` reads a directory."""

    def read(self, rollout_id: str, *, payloads: bool = True) -> CaptureRead: ...


_READ_FLAGS: Final = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def read_local(path: str) -> bytes:
    """The bytes of the local regular file ``path``, read to its end; ``OSError`` for anything
    else (opened without blocking, so a FIFO is refused instead of waited on)."""
    fd = os.open(path, _READ_FLAGS)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):  # as open() says it
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        want = info.st_size + 1  # one more than its size: a file that grew is read on
        first = os.read(fd, want)
        if len(first) < want:  # a short read of a regular file is its end: no read to see it
            return first
        chunks = [first]
        while chunk := os.read(fd, storage.LOCAL_CHUNK_SIZE):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


# str.strip() removes these ASCII characters too (bytes.strip() only the first six).
_ASCII_SPACE: Final = b" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"


def parse_capture(data: bytes, *, payloads: bool = True) -> tuple[list[Obj], int]:
    """``(records, invalid line count)`` of one capture file's bytes; raises on bytes not UTF-8."""
    # Lines are split as bytes either way: in UTF-8, the bytes \r and \n are only ever those
    # characters, so the lines are those of the decoded text (0.7.0's writer escapes non-ASCII).
    ascii = data.isascii()
    if not ascii:
        data.decode("utf-8")  # raises on bytes that are not UTF-8
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    lines = data.split(b"\n")
    records: list[Obj] = []
    invalid = 0
    position = 0
    for line in lines:
        if not line:
            continue
        try:
            value = orjson.loads(line)  # JSON whitespace around the line is allowed
        except orjson.JSONDecodeError:
            # Blank lines (by str.strip, which knows more whitespace) take no position; other
            # lines go through the json module, as 0.7.0 reads them (NaN, huge integers).
            stripped: bytes | str = line.strip(_ASCII_SPACE) if ascii else line.decode("utf-8").strip()
            if not stripped:
                continue
            try:
                value = json.loads(stripped)
            except ValueError:
                invalid += 1
                position += 1
                continue
        try:
            if not isinstance(value, dict):
                raise TypeError("not an object")
            records.append(build_record(value, position, payloads=payloads))
        except Exception:  # noqa: BLE001 - any failure makes the line invalid, as in 0.7.0
            invalid += 1
        position += 1
    return records, invalid


class CaptureStore:
    """Read-only view of one CaptureStore directory (local path or fsspec URL).

    ``files_read`` lists every file read so far (JSONL files and markers), for provenance.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory.rstrip("/") or directory
        self.files_read: list[FileRead] = []
        self._local = storage.is_local(directory)
        self._names: frozenset[str] | None = None
        self._listed = False
        self._base_uri: str | None = None
        self.missing = False

    def _url(self, name: str) -> str:
        return storage.join(self.directory, name)

    def _path(self, name: str) -> str:
        directory = self.directory
        if directory.startswith("file://"):
            directory = directory[len("file://") :]
        return os.path.join(directory, name)

    def list_names(self) -> frozenset[str] | None:
        """Names of the capture files in the directory (None if it cannot be listed)."""
        if self._listed:
            return self._names
        self._listed = True
        try:
            if self._local:
                directory = self._path("")
                if not os.path.isdir(directory):
                    self.missing = True
                    self._names = frozenset()
                else:
                    self._names = frozenset(n for n in os.listdir(directory) if _is_capture_name(n))
            else:
                if not storage.isdir(self.directory):
                    self.missing = True
                    self._names = frozenset()
                else:
                    found = storage.glob(self._url("*.capture.*"))
                    self._names = frozenset(
                        storage.name(u) for u in found if _is_capture_name(storage.name(u))
                    )
        except (GymflowError, OSError) as exc:
            logger.warning(
                "cannot list capture directory %s (%s); checking files one by one", self.directory, exc
            )
            self._names = None
        return self._names

    def _exists(self, name: str) -> bool:
        names = self.list_names()
        if names is not None:
            return name in names
        if self._local:
            return os.path.exists(self._path(name))
        return storage.exists(self._url(name))

    def _read_bytes(self, name: str) -> bytes:
        if self._local:
            return read_local(self._path(name))
        fs, path = storage.filesystem(self._url(name))
        return bytes(fs.cat_file(path))

    def uri(self, name: str) -> str:
        """The record URI of file ``name`` in this directory."""
        if self._base_uri is None:
            self._base_uri = storage.to_uri(self._path("x") if self._local else self._url("x"))[:-1]
        return self._base_uri + name

    def url(self, name: str) -> str:
        """A URL (or local path) to read file ``name`` of this directory with :mod:`gymflow.storage`."""
        return self._path(name) if self._local else self._url(name)

    def _record_read(self, name: str, data: bytes) -> None:
        self.files_read.append(FileRead(self.uri(name), hashlib.sha256(data).hexdigest(), len(data)))

    def read(self, rollout_id: str, *, payloads: bool = True) -> CaptureRead:
        """The calls captured for ``rollout_id`` (an id that passed the file-name rule)."""
        jsonl, marker = rollout_id + JSONL_SUFFIX, rollout_id + MARKER_SUFFIX
        try:
            has_jsonl = self._exists(jsonl)
            has_marker = self._exists(marker)
        except Exception as exc:  # noqa: BLE001 - [G] remote existence failures map to the gap
            logger.warning("capture store %s: cannot check %s: %s", self.directory, rollout_id, exc)
            return CaptureRead(exists=True, unreadable=True)
        if not has_jsonl and not has_marker:
            return CaptureRead(exists=False)
        records: list[Obj] = []
        invalid = 0
        try:
            if has_marker:
                self._record_read(marker, self._read_bytes(marker))
            if has_jsonl:
                data = self._read_bytes(jsonl)
                self._record_read(jsonl, data)
                records, invalid = parse_capture(data, payloads=payloads)
        except Exception as exc:  # noqa: BLE001 - any read failure is the unreadable gap
            logger.warning("capture store %s: cannot read %s: %s", self.directory, jsonl, exc)
            return CaptureRead(exists=True, unreadable=True)
        return CaptureRead(exists=True, records=records, invalid=invalid, incomplete=has_marker)


def _is_capture_name(name: str) -> bool:
    return name.endswith(JSONL_SUFFIX) or name.endswith(MARKER_SUFFIX)
