"""Reading one shard in a single streaming pass: hash, parse, per-row facts (aggregate.md §1.3).

:func:`scan_shard` is the per-shard unit of work (one Prefect task per shard runs it). It keeps,
per row, only its :class:`RowFacts`, its group and where its bytes are, never the row itself;
handed to a spill, it holds at most :data:`RUN_ROWS` of those.
Rows are read with :func:`gymflow.jsonline.loads_shallow` (the few fields the metrics read are
decoded, the rest only validated), falling back to the full exact reading for any line it cannot
vouch for, so rows and errors are those of :func:`gymflow.jsonline.loads_exact`. Remote shards
are spooled to a local temporary file during the same pass, so the merge can later copy rows in
sorted order without a second download.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import msgspec
import orjson

from gymflow import storage, threads
from gymflow.aggregate._rows import RowFacts, ScoreSpec, extract
from gymflow.errors import InputError
from gymflow.jsonline import LineError, Raw, decode_raw, loads_exact, loads_shallow
from gymflow.perf_summary import PerfAccumulator

__all__ = ["GroupRef", "ScanRow", "ShardScan", "parse_line", "resolve_group", "scan_shard"]

_HASH_BATCH = 4 * 2**20
RUN_ROWS = 32_768
"""Rows a spilling scan holds at most before it writes them out as one run."""
_JSON_SPACE = b" \t\n\r"

NO_AGENT = "agent"
"""Group of a row that names neither an environment server nor an agent."""


@dataclass(frozen=True, slots=True)
class GroupRef:
    """The group a row belongs to (§1.6): an environment server, or else its agent's name."""

    key: str
    is_environment: bool
    agent: str


_GROUPS: dict[tuple[str, bool, str], GroupRef] = {}


def _group(key: str, is_environment: bool, agent: str) -> GroupRef:
    # One object per distinct group: rows share it instead of holding copies of the names.
    ref = _GROUPS.get((key, is_environment, agent))
    if ref is None:
        ref = _GROUPS[(key, is_environment, agent)] = GroupRef(key, is_environment, agent)
    return ref


def resolve_group(row: Mapping[str, Any], agent_environments: Mapping[str, str]) -> GroupRef:
    """Group of ``row``: its ``_ng_environment_server`` stamp, else the environment server the
    config puts in front of its agent, else the agent name (no error without a config)."""
    agent_ref = row.get("agent_ref")
    agent = agent_ref.get("name") if isinstance(agent_ref, Mapping) else None
    agent_name = agent if isinstance(agent, str) and agent else NO_AGENT
    stamp = row.get("_ng_environment_server")
    if isinstance(stamp, str) and stamp:
        return _group(stamp, True, agent_name)
    environment = agent_environments.get(agent_name)
    if environment is not None:
        return _group(environment, True, agent_name)
    return _group(agent_name, False, agent_name)


class ScanRow:
    """One loaded row: its facts, group, shard (its index), line number and byte span there.

    The line, offset and length are packed into one integer (a row is held for every line of
    the input: one object instead of three).
    """

    __slots__ = ("compact", "facts", "group", "shard", "_place")

    def __init__(
        self, facts: RowFacts, group: GroupRef, shard: int, line: int, offset: int, length: int, compact: bool
    ) -> None:
        self.facts = facts
        self.group = group
        self.shard = shard
        self.compact = compact
        self._place = (
            (line << 40 | length) << 48 | offset
            if length < 2**40 and offset < 2**48
            else (line, offset, length)
        )

    def _fields(self) -> tuple[Any, ...]:
        return (self.facts, self.group, self.shard, self.line, self.offset, self.length, self.compact)

    def __eq__(self, other: object) -> bool:
        return self._fields() == other._fields() if isinstance(other, ScanRow) else NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        names = ("facts", "group", "shard", "line", "offset", "length", "compact")
        return f"ScanRow({', '.join(f'{n}={v!r}' for n, v in zip(names, self._fields(), strict=True))})"

    @classmethod
    def placed(cls, facts: RowFacts, group: GroupRef, shard: int, place: Any, compact: bool) -> ScanRow:
        """A row from its :attr:`place` (as a spilled row keeps it)."""
        row = cls.__new__(cls)
        row.facts, row.group, row.shard, row._place, row.compact = facts, group, shard, place, compact
        return row

    @property
    def place(self) -> Any:
        """Line, offset and length, packed."""
        return self._place

    @property
    def line(self) -> int:
        place = self._place
        return place[0] if isinstance(place, tuple) else place >> 88

    @property
    def offset(self) -> int:
        place = self._place
        return place[1] if isinstance(place, tuple) else place & (2**48 - 1)

    @property
    def length(self) -> int:
        place = self._place
        return place[2] if isinstance(place, tuple) else place >> 48 & (2**40 - 1)


@dataclass
class ShardScan:
    """What one shard contributes: digest, rows (facts only), per-group perf and key sets."""

    url: str
    index: int
    sha256: str
    nbytes: int
    rows: list[ScanRow] = field(default_factory=list)
    """The rows held (in line order): all of them, unless they were spilled as ``runs``."""
    runs: list[str | bytes] = field(default_factory=list)
    """The rows spilled, each run sorted by key (``gymflow.aggregate._spill``): a local file, or
    its bytes."""
    count: int = 0
    """Rows loaded."""
    perf: dict[str, PerfAccumulator] = field(default_factory=dict)
    row_keys: dict[str, set[str]] = field(default_factory=dict)
    groups: dict[str, GroupRef] = field(default_factory=dict)
    """Each group's reference as its first row in the shard names it."""
    spool: str | None = None

    @property
    def source(self) -> str:
        """Local file holding the shard's bytes (the spool for remote shards)."""
        return self.spool if self.spool is not None else self.url


def parse_line(url: str, line_number: int, text: bytes) -> dict[str, Any]:
    """Parse one non-blank line as a JSON object, exactly (:mod:`gymflow.jsonline`): errors name
    the file, the line and, where one applies, the field."""
    try:
        value, _ = loads_exact(text.strip(_JSON_SPACE))
    except LineError as exc:
        where = f"line {line_number}" if exc.field is None else f"line {line_number}, field {exc.field!r}"
        raise InputError(f"Malformed JSON in {url!r} at {where}: {exc.message}") from None
    if not isinstance(value, dict):
        kind = type(value).__name__ if value is not None else "null"
        raise InputError(
            f"Malformed rollout in {url!r} at line {line_number}: expected a JSON object, got {kind}"
        )
    return value


def _compact_layout(line: bytes) -> bool | None:
    """Whether ``line`` is compact JSON judging by its layout alone (then the merge copies it
    verbatim); ``None`` when the layout does not tell (:func:`_dumps_to` decides).

    A serializer uses one separator style for a whole line, so the first key's separator tells:
    ``{"key":value`` with nothing around the braces is compact.
    """
    end = len(line) - (1 if line.endswith(b"\n") else 0)
    if line[:2] == b'{"' and line[end - 1 : end] == b"}":
        quote = line.find(b'"', 2, end)
        while quote > 0 and line[quote - 1] == 0x5C:  # an escaped quote inside the first key
            quote = line.find(b'"', quote + 1, end)
        if quote > 0 and line[quote + 1 : quote + 2] == b":":
            return line[quote + 2 : quote + 3] not in (b" ", b"\t", b"\n", b"\r")
    return None


def _dumps_to(obj: dict[str, Any], line: bytes) -> bool:
    """Whether ``line`` (its newline aside) is the compact dump of the row ``obj`` parsed from it."""
    end = len(line) - (1 if line.endswith(b"\n") else 0)
    try:
        dumped = orjson.dumps(obj)
    except TypeError:  # integers beyond 64 bits: re-serialized exactly by the merge
        return False
    return len(dumped) == end and line.startswith(dumped)


class _Response(msgspec.Struct):
    """The one part of a row's ``response`` the metrics read (aggregate.md §3.2)."""

    usage: Any = None


_RESPONSE = msgspec.json.Decoder(_Response)


def _value_fields(spec: ScoreSpec | None) -> frozenset[str]:
    """The top-level fields whose values the scan reads (:func:`extract`, :func:`resolve_group`,
    the perf summary), ``response`` aside (only its ``usage``)."""
    names = {
        "_ng_task_index", "_ng_rollout_index", "mask_sample", "reward",
        "agent_ref", "_ng_environment_server", "ng_perf",
    }  # fmt: skip
    if spec is not None:
        names.add(spec.score_field)
        if spec.answer_key is not None:
            names.add(spec.answer_key)
    return frozenset(names)


def _lean(top: dict[str, Any], wanted: frozenset[str]) -> dict[str, Any]:
    """The row the scan reads, from :func:`loads_shallow`'s reading: every key in order, the
    values the scan reads decoded, ``response`` cut down to its ``usage``, every other string,
    object or array ``None`` (the scan only sees that they are no numbers)."""
    for key, value in top.items():
        if type(value) is Raw:
            if key in wanted:
                top[key] = decode_raw(value)
            elif key == "response" and memoryview(value)[0] == 0x7B:  # an object
                top[key] = {"usage": _RESPONSE.decode(value).usage}
            else:
                top[key] = None
    return top


def _lines(url: str) -> Iterator[tuple[int, bytes]]:
    """(offset, line) of every line; local files through the C line reader."""
    if not storage.is_local(url):
        yield from storage.iter_lines(url)
        return
    offset = 0
    with storage.open_read(url) as handle:
        for line in handle:
            yield offset, line
            offset += len(line)


def scan_shard(
    url: str,
    index: int,
    spec: ScoreSpec | None = None,
    agent_environments: Mapping[str, str] | None = None,
    spool_dir: str | None = None,
    track_keys: bool = True,
    spill: Callable[[list[ScanRow]], str | bytes] | None = None,
) -> ShardScan:
    """Stream ``url`` once: SHA-256 of its bytes, and the facts of every non-blank line.

    ``spool_dir`` (used for non-local shards) receives a local copy of the bytes for the merge.
    ``track_keys`` records the top-level keys each group's rows carry (only the count-as-zero
    rules need them). ``spill`` takes the rows held every :data:`RUN_ROWS` rows and at the end,
    and returns the run it made of them (a file, or its bytes); else they stay in ``rows``.
    Raises :class:`InputError` naming file and line for a malformed line or index.
    """
    environments = agent_environments or {}
    digest = hashlib.sha256()
    nbytes = 0
    scan = ShardScan(url=url, index=index, sha256="", nbytes=0)
    spool: BinaryIO | None = None
    if spool_dir is not None and not storage.is_local(url):
        handle, scan.spool = tempfile.mkstemp(prefix="shard-", suffix=".jsonl", dir=spool_dir)
        spool = os.fdopen(handle, "wb", buffering=2**20)
    # Hash (and spool) in a helper thread: hashlib and file writes release the GIL, so both
    # overlap with parsing. One worker keeps the batches in order.
    hasher = threads.executor(1, "gymflow-hash")
    pending: list[Future[None]] = []
    batch: list[bytes] = []
    batch_bytes = 0

    def consume(lines: list[bytes]) -> None:
        # One update per batch: each call releases the GIL and must win it back from the parsing
        # thread, so per-line calls would mostly wait.
        data = b"".join(lines)
        digest.update(data)
        if spool is not None:
            spool.write(data)

    def flush() -> None:
        nonlocal batch, batch_bytes
        if batch:
            pending.append(hasher.submit(consume, batch))
            batch, batch_bytes = [], 0
        while len(pending) > 4:
            pending.pop(0).result()

    wanted = _value_fields(spec)
    rows = scan.rows
    perf = scan.perf
    try:
        line_number = 0
        for offset, line in _lines(url):
            line_number += 1
            size = len(line)
            nbytes += size
            batch.append(line)
            batch_bytes += size
            if batch_bytes >= _HASH_BATCH:
                flush()
            if not line or line.isspace():
                continue
            # The fast reading, or (for a line it cannot vouch for) the full exact one, which
            # returns the row or raises the precise error.
            top = loads_shallow(line)
            row = parse_line(url, line_number, line) if top is None else _lean(top, wanted)
            compact = _compact_layout(line)
            if compact is None:
                compact = _dumps_to(row if top is None else parse_line(url, line_number, line), line)
            try:
                facts = extract(row, spec)
            except InputError as exc:
                raise InputError(f"{url!r} line {line_number}: {exc}") from None
            group = resolve_group(row, environments)
            accumulator = perf.get(group.key)
            if accumulator is None:
                accumulator = perf[group.key] = PerfAccumulator()
                scan.row_keys[group.key] = set()
                scan.groups[group.key] = group
            accumulator.add(row.get("ng_perf"))
            if track_keys:
                scan.row_keys[group.key].update(row)
            rows.append(ScanRow(facts, group, index, line_number, offset, size, compact))
            if spill is not None and len(rows) >= RUN_ROWS:
                scan.count += len(rows)
                scan.runs.append(spill(rows))
                rows = scan.rows = []
        scan.count += len(rows)
        if spill is not None and rows:
            scan.runs.append(spill(rows))
            scan.rows = []
        flush()
        for future in pending:
            future.result()
    except BaseException:
        hasher.shutdown(wait=True, cancel_futures=True)
        if spool is not None:
            spool.close()
            os.unlink(spool.name if isinstance(spool.name, str) else str(scan.spool))
            spool = None
        raise
    finally:
        hasher.shutdown(wait=True)
        if spool is not None:
            spool.close()
    scan.sha256 = digest.hexdigest()
    scan.nbytes = nbytes
    return scan
