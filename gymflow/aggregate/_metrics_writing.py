"""The aggregate metrics file (aggregate.md §2), written piece by piece.

The file is what ``orjson.dumps(entries, option=OPT_INDENT_2)`` makes of the entries (or, when an
integer lies beyond orjson's 64 bits, ``json.dumps(entries, indent=2)``), byte for byte. It is
produced one value at a time: each entry's blocks, and each object of a ``group_level_metrics``
list (a :class:`~gymflow.aggregate._metrics.TaskEntries` computes them one task at a time), are
dumped alone and re-indented to their depth, so a group's task objects are never all held, and
neither is the file.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import orjson

from gymflow import storage

__all__ = ["metrics_bytes", "metrics_chunks", "write_metrics"]

Dump = Callable[[Any], bytes]
_FLUSH = 2**20


def _orjson(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2)


def _json(value: Any) -> bytes:
    return json.dumps(value, indent=2).encode()


def _at_depth(data: bytes, depth: int) -> bytes:
    # JSON strings hold no raw newline: every newline of a dump starts one of its lines.
    return data.replace(b"\n", b"\n" + b"  " * depth) if depth else data


def _list(items: Iterable[Any], depth: int, dump: Dump) -> Iterator[bytes]:
    """A JSON list at ``depth`` (its items one at a time)."""
    pad = b"\n" + b"  " * (depth + 1)
    first = True
    for item in items:
        yield (b"[" if first else b",") + pad
        yield _at_depth(dump(item), depth + 1)
        first = False
    yield b"[]" if first else b"\n" + b"  " * depth + b"]"


def _entry(entry: Mapping[str, Any], depth: int, dump: Dump) -> Iterator[bytes]:
    """One entry: its values dumped one by one; a list that is not a ``list`` (computed on
    demand) streamed item by item."""
    pad = b"\n" + b"  " * (depth + 1)
    first = True
    for key, value in entry.items():
        yield (b"{" if first else b",") + pad + dump(key) + b": "
        if isinstance(value, Sequence) and not isinstance(value, list | tuple | str):
            yield from _list(value, depth + 1, dump)
        else:
            yield _at_depth(dump(value), depth + 1)
        first = False
    yield b"{}" if first else b"\n" + b"  " * depth + b"}"


def metrics_chunks(entries: Sequence[Mapping[str, Any]], dump: Dump = _orjson) -> Iterator[bytes]:
    """The file's bytes in pieces (``dump`` formats one value: orjson's indented dump, or json's)."""
    pad = b"\n  "
    first = True
    for entry in entries:
        yield b"[" + pad if first else b"," + pad
        yield from _entry(entry, 1, dump)
        first = False
    yield b"[]" if first else b"\n]"


def metrics_bytes(entries: Sequence[Mapping[str, Any]]) -> bytes:
    """The whole file in memory (orjson; integers beyond 64 bits fall back to the json module)."""
    try:
        return b"".join(metrics_chunks(entries))
    except TypeError:
        return b"".join(metrics_chunks(entries, _json))


def _write_local(target: int, entries: Sequence[Mapping[str, Any]]) -> tuple[str, int]:
    for dump in (_orjson, _json):
        digest = hashlib.sha256()
        size = 0
        pending: list[bytes] = []
        held = 0
        try:
            for chunk in metrics_chunks(entries, dump):
                pending.append(chunk)
                held += len(chunk)
                if held >= _FLUSH:
                    data = b"".join(pending)
                    digest.update(data)
                    storage.write_all(target, data)
                    size += held
                    pending, held = [], 0
        except TypeError:  # orjson: an integer beyond 64 bits; start over with json
            if dump is _json:
                raise
            os.ftruncate(target, 0)
            os.lseek(target, 0, os.SEEK_SET)
            continue
        data = b"".join(pending)
        digest.update(data)
        storage.write_all(target, data)
        return digest.hexdigest(), size + held
    raise AssertionError("unreachable")


def write_metrics(url: str, entries: Sequence[Mapping[str, Any]]) -> tuple[str, int]:
    """Replace ``url`` with the metrics file of ``entries`` atomically, streamed to a local file;
    returns its SHA-256 and size."""
    if storage.is_local(url):
        return storage.write_atomic_local(url, lambda target: _write_local(target, entries))
    return storage.write_atomic(url, metrics_bytes(entries))
