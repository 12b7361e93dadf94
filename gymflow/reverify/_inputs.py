"""Reading the native inputs (reverify.md §2.1, §4 point 3) and building ``/verify`` bodies (§2.2)."""

from __future__ import annotations

import hashlib
import os
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import orjson

from gymflow import scratch, storage
from gymflow._json_agreement import object_members
from gymflow.errors import InputError

__all__ = [
    "Key",
    "Materialized",
    "RolloutHead",
    "build_body",
    "content_sha256",
    "iter_rows",
    "key_of",
    "missing_response",
    "parse_row",
    "read_heads",
    "read_materialized",
    "row_key",
    "sent_fields",
]

Key = tuple[int, int]
Warn = Callable[[str], None]

_INDEX_FIELDS = ("_ng_task_index", "_ng_rollout_index")


def _strip(raw: bytes) -> bytes:
    if raw.endswith(b"\n"):
        raw = raw[:-1]
        if raw.endswith(b"\r"):
            raw = raw[:-1]
    return raw


def parse_row(url: str, number: int, raw: bytes) -> dict[str, Any]:
    """One JSONL line as an object, or the §2.1 input error naming file and line."""
    try:
        row = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InputError(f"Malformed JSON in {url!r} at line {number}: {exc}") from None
    if not isinstance(row, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
            type(row), "a number"
        )
        raise InputError(f"Malformed JSON in {url!r} at line {number}: expected a JSON object, got {kind}")
    return row


def row_key(url: str, number: int, row: Mapping[str, Any]) -> Key:
    """The (task, rollout) key; both must be JSON integers."""
    return _checked_key(url, number, row.get(_INDEX_FIELDS[0]), row.get(_INDEX_FIELDS[1]))


def _checked_key(url: str, number: int, task: Any, rollout: Any) -> Key:
    for name, value in zip(_INDEX_FIELDS, (task, rollout), strict=True):
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"{url!r} line {number}: {name} must be an integer")
    return task, rollout


def key_of(row: Mapping[str, Any]) -> Key | None:
    """The key of a row gymflow did not write itself, or None when it has no integer indices."""
    task, rollout = row.get("_ng_task_index"), row.get("_ng_rollout_index")
    if type(task) is int and type(rollout) is int:
        return task, rollout
    return None


def _lines(url: str) -> Iterator[tuple[int, int, bytes]]:
    """``(line number, offset, line without terminator)`` for every non-blank line."""
    number = 0
    for offset, line in storage.iter_lines(url):
        number += 1
        if line.strip():
            yield number, offset, _strip(line)


def iter_rows(url: str) -> Iterator[tuple[int, int, bytes, dict[str, Any]]]:
    """``(line number, offset, line without terminator, object)`` for every non-blank line."""
    for number, offset, raw in _lines(url):
        yield number, offset, raw, parse_row(url, number, raw)


def _value(raw: bytes, where: slice | None) -> Any:
    """The JSON value at ``where`` in ``raw`` (a slice :func:`object_members` gave), None when the
    member is absent."""
    return None if where is None else orjson.loads(raw[where])


class RolloutHead(NamedTuple):
    """What selection reads of a rollout (or sidecar) row: its key, whether it has a ``response``
    and its failure class."""

    task: Any
    rollout: Any
    has_response: bool
    failure_class: Any
    response_at: int = 0
    """Where the line holds its ``response`` (``start << 32 | stop``), when that is all a
    ``/verify`` body takes from the line (no ``deliverables_dir``, no ``reference_ids``); 0 when
    :func:`sent_fields` must read the line."""


_HEAD = (
    b"_ng_task_index",
    b"_ng_rollout_index",
    b"response",
    b"_ng_failure_class",
    b"deliverables_dir",
    b"reference_ids",
)


def read_heads(url: str) -> Iterator[tuple[int, int, bytes, RolloutHead, Key]]:
    """:func:`iter_rows` reading only a :class:`RolloutHead` of each row, and its key (checked as
    :func:`row_key` checks it). The members are found by one pass in C over a line it can vouch
    orjson reads the same (:func:`~gymflow._json_agreement.object_members`); any other line is
    parsed whole, so it is accepted or refused, with the same message, as :func:`parse_row`
    would."""
    for number, offset, raw in _lines(url):
        found = object_members(raw, _HEAD)
        if found is None:
            row = parse_row(url, number, raw)
            task, rollout = row.get("_ng_task_index"), row.get("_ng_rollout_index")
            head = RolloutHead(task, rollout, "response" in row, row.get("_ng_failure_class"))
        else:
            task_at, rollout_at, response_at, failure_at, deliverables_at, references_at = found
            task, rollout = _value(raw, task_at), _value(raw, rollout_at)
            body_at = 0
            if response_at is not None and deliverables_at is None and references_at is None:
                body_at = response_at.start << 32 | response_at.stop
            head = RolloutHead(task, rollout, response_at is not None, _value(raw, failure_at), body_at)
        yield number, offset, raw, head, _checked_key(url, number, head.task, head.rollout)


class Materialized:
    """Materialized lines by key, kept as ``(offset, length)`` in a local file and read back on demand
    (memory per row: one dict entry, whatever the row size). A local input is read in place; a remote
    one is spooled once into a temporary file, removed by :meth:`close` (or when the index is
    garbage-collected)."""

    def __init__(
        self, path: str, spans: dict[Key, int], spooled: bool, routes: dict[Key, RouteFields] | None = None
    ) -> None:
        self.path = path
        self.spans = spans  # offset << 32 | length
        self.spooled = spooled
        self.routes = routes if routes is not None else {}
        """Per key of a flat row (no ``task_input`` object), the fields its body is routed by."""
        self._fd: int | None = None
        self._cleanup = weakref.finalize(self, scratch.discard, path) if spooled else None

    def __len__(self) -> int:
        return len(self.spans)

    def __contains__(self, key: object) -> bool:
        return key in self.spans

    def get(self, key: Key) -> bytes | None:
        """The exact line bytes of ``key`` (without terminator), or None."""
        span = self.spans.get(key)
        if span is None:
            return None
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        length = span & 0xFFFFFFFF
        data = os.pread(self._fd, length, span >> 32)
        if len(data) != length:
            raise InputError(f"materialized inputs {self.path!r} changed while reverify was reading them")
        return data

    def __getitem__(self, key: Key) -> bytes:
        data = self.get(key)
        if data is None:
            raise KeyError(key)
        return data

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._cleanup is not None:
            self._cleanup()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_fd"] = None
        state["_cleanup"] = None
        return state


RouteFields = Mapping[str, Any]
"""The fields of a ``/verify`` body its server is routed by (:data:`ROUTE_FIELDS`)."""

ROUTE_FIELDS = ("agent_ref", "task_source", "_ng_environment_server")
"""What routing reads of a body (:meth:`gymflow.gym_config.Routing.route_row`). A flat
materialized row's body takes them from that row alone (:func:`build_body` adds only the
rollout's ``response``, ``deliverables_dir`` and ``reference_ids``)."""


_MATERIALIZED_HEAD = (
    b"_ng_task_index",
    b"_ng_rollout_index",
    *(name.encode() for name in ROUTE_FIELDS),
    b"task_input",
)
"""What the index reads of a materialized row: its key, the fields it is routed by and whether it
has a ``task_input`` object."""


class _Routes:
    """The :data:`ROUTE_FIELDS` of flat rows, one object per distinct value."""

    def __init__(self) -> None:
        self.by_text: dict[tuple[bytes, ...], RouteFields | None] = {}
        self.by_value: dict[bytes, RouteFields] = {}

    def of_text(
        self, raw: bytes, route: Sequence[slice | None], task_input: slice | None
    ) -> RouteFields | None:
        """The route fields of the row ``raw`` whose :data:`ROUTE_FIELDS` are at ``route`` and
        ``task_input`` member at ``task_input``, or None when that member is an object."""
        if task_input is not None and raw[task_input.start] == ord("{"):
            return None
        texts = tuple(b"" if where is None else raw[where] for where in route)
        if texts in self.by_text:
            return self.by_text[texts]
        fields = {name: orjson.loads(text) for name, text in zip(ROUTE_FIELDS, texts, strict=True) if text}
        shared = self.by_text[texts] = self.shared(fields)
        return shared

    def of_row(self, row: Mapping[str, Any]) -> RouteFields | None:
        if isinstance(row.get("task_input"), Mapping):
            return None
        return self.shared({name: row[name] for name in ROUTE_FIELDS if name in row})

    def shared(self, fields: dict[str, Any]) -> RouteFields:
        try:
            key = orjson.dumps(fields)
        except TypeError:
            return fields
        return self.by_value.setdefault(key, fields)


def read_materialized(url: str, warn: Warn) -> Materialized:
    """Materialized rows by key (exact line bytes, without terminator); the last row of a key wins
    and one warning names the repeated keys. A row's key and route fields are found by one pass
    in C over a line it can vouch orjson reads the same
    (:func:`~gymflow._json_agreement.object_members`); any other row is parsed whole, so it is
    accepted or refused as :func:`parse_row` would."""
    spans: dict[Key, int] = {}
    routes: dict[Key, RouteFields] = {}
    shared = _Routes()
    repeated: dict[Key, None] = {}
    local = storage.is_local(url)
    spool: Any = None
    path = storage.to_uri(url)
    if local:
        path = path.removeprefix("file://")
    else:
        fd, path = scratch.scratch_file("materialized", ".jsonl")
        spool = os.fdopen(fd, "wb")
    written = 0
    try:
        for number, offset, raw in _lines(url):
            found = object_members(raw, _MATERIALIZED_HEAD)
            if found is None:
                row = parse_row(url, number, raw)
                key = row_key(url, number, row)
                fields = shared.of_row(row)
            else:
                task, rollout, *route, task_input = found
                key = _checked_key(url, number, _value(raw, task), _value(raw, rollout))
                fields = shared.of_text(raw, route, task_input)
            if key in spans:
                repeated[key] = None
            if spool is not None:
                spool.write(raw + b"\n")
                offset = written
                written += len(raw) + 1
            spans[key] = offset << 32 | len(raw)
            if fields is None:
                routes.pop(key, None)
            else:
                routes[key] = fields
    except BaseException:
        if spool is not None:
            spool.close()
            scratch.discard(path)
        raise
    if spool is not None:
        spool.close()
    if repeated:
        keys = list(repeated)
        shown = ", ".join(repr(k) for k in keys[:10]) + (", ..." if len(keys) > 10 else "")
        warn(
            f"{len(keys)} materialized input key(s) repeated in {url!r}; the last row of each is used: "
            f"[{shown}]"
        )
    return Materialized(path, spans, spooled=spool is not None, routes=routes)


def content_sha256(materialized: bytes, source: bytes) -> str:
    """§4 point 4's ``source_sha256`` of a native row: materialized line, ``\\n``, source line."""
    digest = hashlib.sha256(materialized)
    digest.update(b"\n")
    digest.update(source)
    return digest.hexdigest()


_SENT = (b"response", b"deliverables_dir", b"reference_ids")


def sent_fields(line: bytes, response_at: int = 0) -> dict[str, Any]:
    """What a rollout line (one selection accepted) gives its ``/verify`` body (:func:`build_body`):
    its ``response`` as the line's own JSON text, an ``orjson.Fragment`` that ``orjson.dumps``
    writes as it is instead of the response being parsed and written again (on bodies of 2 to 25 KB,
    about a third of the client's time a row), and ``deliverables_dir`` and ``reference_ids`` when the
    row has them. Found by one pass in C over a line it can vouch orjson reads the same
    (:func:`~gymflow._json_agreement.object_members`); any other line is parsed whole. The server
    reads the same values either way: only the response's spacing and escapes may differ from
    ``orjson.dumps``'s. A body holding the fragment is always written by orjson: its other values
    come from ``orjson.loads``, and orjson writes whatever it reads.

    With ``response_at`` (:attr:`RolloutHead.response_at`: selection read this line and found
    that the body takes only its response, there) the line is not read again: the plan reads it
    back from where selection read it (a file rewritten under a run is not supported; one whose
    line changed length stops the run)."""
    if response_at:
        return {"response": orjson.Fragment(line[response_at >> 32 : response_at & 0xFFFFFFFF])}
    response, deliverables_dir, reference_ids = object_members(line, _SENT) or (None, None, None)
    if response is not None:
        fields: dict[str, Any] = {"response": orjson.Fragment(line[response])}
        if deliverables_dir is not None:
            fields["deliverables_dir"] = orjson.loads(line[deliverables_dir])
        if reference_ids is not None:
            fields["reference_ids"] = orjson.loads(line[reference_ids])
        return fields
    row: dict[str, Any] = orjson.loads(line)
    return row


def build_body(materialized: Mapping[str, Any], rollout: Mapping[str, Any]) -> dict[str, Any]:
    """The ``/verify`` body of §2.2 (flat or materialized-taskset row)."""
    task_input = materialized.get("task_input")
    if isinstance(task_input, Mapping):
        body = {k: v for k, v in materialized.items() if k not in ("task_id", "task_input")}
        task_data = task_input.get("task_data", {})
        if not isinstance(task_data, Mapping):
            raise InputError("reverify: task_input.task_data must be an object")
        body.update(task_data)
        for name, value in task_input.items():
            if name == "task_data":
                continue
            if name in task_data and task_data[name] != value:
                raise InputError(f"reverify: conflicting task field {name!r} inside and outside task_data")
            body[name] = value
    else:
        body = dict(materialized)
    body["response"] = rollout["response"]
    for name in ("deliverables_dir", "reference_ids"):
        if name in rollout:
            body[name] = rollout[name]
    return body


def missing_response(key: Key, rollout: Mapping[str, Any]) -> InputError:
    kind = rollout.get("_ng_result_type") or "unknown"
    return InputError(
        f"reverify: rollout (task {key[0]}, rollout {key[1]}) of result type {kind!r} has no `response`, "
        "which reverification needs"
    )
