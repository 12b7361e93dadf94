"""Provenance records and the cache key (``spec/provenance.md`` §1 and §2).

A record binds the reports a command wrote to the SHA-256 of every byte it read, the parameters
it ran with and the versions of the code; it sits beside the primary output as
``<stem>.provenance.json`` and is written last, atomically. The cache key is computed here, and
only here, so the direct path and Prefect tasks agree on what is up to date.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import itertools
import logging
import platform
import re
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, NamedTuple

import orjson

from gymflow import __version__, storage, storage_faults, threads
from gymflow.errors import InputError, UsageError

logger = logging.getLogger(__name__)

SCHEMA = "gymflow.provenance/1"
REDACTED = "<redacted>"
RECORD_SUFFIX = ".provenance.json"
TRACKED_PACKAGES = ("prefect", "pydantic", "fsspec", "s3fs", "orjson", "httpx")
GIT_TIMEOUT_S = 2.0
"""How long each ``git`` call naming the code may take before the record names the files instead."""
HASHED_SUFFIXES = (".py", ".yaml")

FileStatus = Literal["ok", "changed", "missing"]
OrchestratorKind = Literal["prefect", "direct"]


@dataclass(frozen=True, slots=True)
class FileDigest:
    """One file as a record lists it: normalised URI, lowercase hex SHA-256 and size in bytes."""

    uri: str
    sha256: str
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"uri": self.uri, "sha256": self.sha256, "bytes": self.bytes}


class FileCheck(NamedTuple):
    """The result of re-hashing one file a record lists."""

    uri: str
    status: FileStatus


def digest(url: str) -> FileDigest:
    """Hash the file at ``url`` (streamed) and name it by its record URI; a local file that
    :func:`prefetch` hashed is not read again while its size and modification time stay the
    same."""
    with _prefetch_lock:
        entry = _prefetched.get(url)
    if entry is not None:
        version, future = entry
        try:
            found = future.result()
        except Exception:  # noqa: BLE001 - hashed again below, where the error is raised
            found = None
        if found is not None and storage.local_version(url) == version:
            return found
    return _hash(url)


def _hash(url: str) -> FileDigest:
    sha, count = storage.sha256(url)
    return FileDigest(uri=storage.to_uri(url), sha256=sha, bytes=count)


_prefetched: dict[str, tuple[tuple[int, int], Future[FileDigest]]] = {}
_prefetch_lock = threading.Lock()


def prefetch(urls: Iterable[str]) -> None:
    """Start hashing the local files among ``urls`` on a background thread, so the hashing
    overlaps whatever this process does before it needs the digests (importing Prefect takes
    longer than hashing most inputs). Remote and missing files are left to :func:`digest`."""
    pending: list[tuple[str, Future[FileDigest]]] = []
    with _prefetch_lock:
        for url in urls:
            version = storage.local_version(url)
            if version is None or _prefetched.get(url, ((-1, -1), None))[0] == version:
                continue
            future: Future[FileDigest] = Future()
            _prefetched[url] = (version, future)
            pending.append((url, future))
    if pending:
        threads.start(_hash_each, pending, name="gymflow-prefetch")


def remember(url: str, known: FileDigest) -> None:
    """The digest of a local file this process has just written (and hashed while writing), so
    :func:`digest` does not read it again while it stays unchanged."""
    version = storage.local_version(url)
    if version is None:
        return
    future: Future[FileDigest] = Future()
    future.set_result(known)
    with _prefetch_lock:
        _prefetched[url] = (version, future)


def _hash_each(pending: Sequence[tuple[str, Future[FileDigest]]]) -> None:
    for url, future in pending:
        try:
            future.set_result(_hash(url))
        except BaseException as exc:  # noqa: BLE001 - handed to digest(), which hashes again
            future.set_exception(exc)


def redact(params: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``params`` with secrets removed, at any depth.

    Values under secret-looking keys (``*key*``, ``*secret*``, ``*token*``, ``*password*``,
    ``*credential*``, ``authorization``) become ``"<redacted>"``, and so does a ``Bearer ...``
    value under any key; URL-looking strings lose their user-info and secret query parameters.
    """
    return {str(k): _redact_value(str(k), v) for k, v in params.items()}


def _redact_value(key: str | None, value: Any) -> Any:
    if key is not None and storage_faults.is_secret_name(key) and value is not None:
        return REDACTED
    if isinstance(value, Mapping):
        return redact(value)
    if isinstance(value, list | tuple):
        return [_redact_value(None, item) for item in value]
    if isinstance(value, str) and value[:7].lower() == "bearer ":
        return REDACTED  # an Authorization header's value, under whatever key
    if isinstance(value, str) and "://" in value:
        return storage.to_uri(value) if not storage.is_local(value) else value
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, set | frozenset):
        return sorted(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if hasattr(value, "__fspath__"):
        return str(value)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def canonical_json(obj: Any) -> bytes:
    """Canonical JSON: sorted keys, no whitespace, UTF-8."""
    return orjson.dumps(obj, default=_json_default, option=orjson.OPT_SORT_KEYS)


def cache_key(
    command: str,
    parameters: Mapping[str, Any],
    inputs: Sequence[tuple[str, str]],
    verifier: Mapping[str, Any] | None = None,
) -> str:
    """``"sha256:" + hex`` over the command, gymflow version, parameters, inputs and verifier.

    ``parameters`` must be the output-affecting ones only (the caller leaves out workers,
    progress, log level). ``inputs`` are ``(role, sha256)`` pairs; their order and the files'
    paths do not matter. Parameters and verifier are redacted first, so a key never depends on
    (or leaks) a secret: do not give an output-affecting setting a secret-looking name.
    """
    return cache_key_of_sorted(
        command, parameters, sorted((str(role), str(sha)) for role, sha in inputs), verifier
    )


def cache_key_of_sorted(
    command: str,
    parameters: Mapping[str, Any],
    inputs: Iterable[tuple[str, str]],
    verifier: Mapping[str, Any] | None = None,
) -> str:
    """:func:`cache_key` of ``inputs`` that come sorted (by role, then SHA-256), hashed as they
    come, without holding them (a join's million capture files): the SHA-256 of the canonical
    JSON of ``{schema, command, gymflow, parameters, inputs: [[role, sha256], ...], verifier}``."""
    empty: dict[str, Any] = {
        "schema": SCHEMA,
        "command": command,
        "gymflow": __version__,
        "parameters": redact(parameters),
        "inputs": [],
        "verifier": None if verifier is None else redact(verifier),
    }
    data = canonical_json(empty)
    # Keys sorted: command and gymflow come first; a quote inside their strings is escaped, so
    # the first '"inputs":[]' is the key's own.
    split = data.index(b'"inputs":[]') + len(b'"inputs":[')
    sha = hashlib.sha256(data[:split])
    pairs = iter(inputs)
    previous: tuple[str, str] | None = None
    separator = b""
    # A thousand pairs at a time: checked in order and written as JSON arrays in one call each.
    while chunk := [(str(role), str(digest)) for role, digest in itertools.islice(pairs, 1000)]:
        if previous is not None and chunk[0] < previous:
            raise ValueError(f"inputs out of order: {list(chunk[0])} after {list(previous)}")
        for before, after in itertools.pairwise(chunk):
            if after < before:
                raise ValueError(f"inputs out of order: {list(after)} after {list(before)}")
        sha.update(separator + orjson.dumps(chunk)[1:-1])
        previous, separator = chunk[-1], b","
    sha.update(data[split:])
    return "sha256:" + sha.hexdigest()


def record_path(primary_output_url: str) -> str:
    """Where the record of ``primary_output_url`` lives: ``<stem>.provenance.json`` beside it."""
    base = storage.name(primary_output_url)
    stem = base.rsplit(".", 1)[0] if "." in base.lstrip(".") else base
    prefix = primary_output_url.rstrip("/")[: -len(base)]
    return prefix + stem + RECORD_SUFFIX


def timestamp(moment: datetime | None = None) -> str:
    """``moment`` (default: now) as ISO-8601 UTC with milliseconds and ``Z``."""
    moment = datetime.now(UTC) if moment is None else moment
    if moment.tzinfo is None:
        raise UsageError(f"timestamp {moment.isoformat()} has no timezone; pass an aware datetime")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def code_versions() -> dict[str, Any]:
    """gymflow's and Python's versions, those of the packages that shape the outputs, and the code
    itself: ``git`` (``commit`` and ``dirty``) when gymflow runs from a git checkout, else
    ``files_sha256``, a hash of the installed package's files (:func:`code_identity`)."""
    packages: dict[str, str] = {}
    for package in TRACKED_PACKAGES:
        try:
            packages[package] = installed_version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return {
        "gymflow": __version__,
        "python": platform.python_version(),
        "packages": packages,
        **code_identity(),
    }


def installed_version(distribution: str) -> str:
    """``importlib.metadata.version(distribution)``, read from the ``Version`` header of the
    metadata instead of parsing the whole file as an e-mail message (13 -> 2 ms for the tracked
    packages, on every command); ``PackageNotFoundError`` likewise. The headers end as the
    e-mail parser ends them; a folded ``Version`` header is left to importlib.metadata."""
    found = importlib.metadata.distribution(distribution)
    text = found.read_text("METADATA") or found.read_text("PKG-INFO") or ""
    lines = _LINE_BREAK.split(text)
    for index, line in enumerate(lines):
        header = _HEADER.match(line)
        if header is None:
            if line[:1] in (" ", "\t"):
                continue  # the folded rest of the header before
            break  # the headers end at an empty line, or at a line that is not one
        if header[1].lower() == "version":
            folded = index + 1 < len(lines) and lines[index + 1][:1] in (" ", "\t")
            return found.version if folded else line[header.end() :].lstrip(" \t")
    return found.version  # no Version header: whatever importlib.metadata makes of the file


_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_HEADER = re.compile(r"([\041-\071\073-\176]*):")
"""A header line as the e-mail parser reads one: a name of printable characters but the colon."""


def package_dir() -> Path:
    """The directory of the ``gymflow`` package this process imported."""
    import gymflow

    return Path(gymflow.__file__).resolve().parent


@functools.cache
def code_identity() -> dict[str, Any]:
    """What names the running code, once per process: ``{"git": {"commit", "dirty"}}`` when the
    package's own files are tracked by a git checkout (``dirty``: ``git status --porcelain``
    lists anything), else ``{"files_sha256": ...}`` (:func:`files_sha256`). Never raises: without
    git, or when it fails or takes longer than :data:`GIT_TIMEOUT_S`, the files are hashed."""
    directory = package_dir()
    found = checkout_of(directory)
    if found is not None:
        return {"git": found}
    return {"files_sha256": files_sha256(directory)}


def checkout_of(directory: Path) -> dict[str, Any] | None:
    """``{"commit", "dirty"}`` of the git checkout that tracks ``directory/__init__.py``, or None
    (no git, not a checkout, an installed copy inside one, an error or a timeout)."""
    if not (directory / "__init__.py").is_file():
        return None
    tracked = _git(directory, "ls-files", "--error-unmatch", "--", "__init__.py")
    commit = _git(directory, "rev-parse", "--verify", "HEAD") if tracked is not None else None
    status = _git(directory, "status", "--porcelain") if commit is not None else None
    if commit is None or status is None:
        return None
    return {"commit": commit.strip(), "dirty": bool(status.strip())}


def _git(directory: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def files_sha256(directory: Path) -> str:
    """SHA-256 over the package's ``.py`` and ``.yaml`` files: for each, in sorted order of its
    POSIX path relative to ``directory``, the path, its size and its bytes (each length-prefixed,
    so no two trees hash alike)."""
    files = sorted(
        (path.relative_to(directory).as_posix(), path)
        for path in directory.rglob("*")
        if path.suffix in HASHED_SUFFIXES and path.is_file() and "__pycache__" not in path.parts
    )
    sha = hashlib.sha256()
    for relative, path in files:
        name = relative.encode()
        data = path.read_bytes()
        sha.update(b"%d:%s%d:" % (len(name), name, len(data)))
        sha.update(data)
    return sha.hexdigest()


def build_record(
    command: str,
    cache_key: str,
    inputs: Sequence[FileDigest],
    outputs: Sequence[FileDigest],
    parameters: Mapping[str, Any],
    orchestrator: Mapping[str, Any],
    started_at: datetime | str,
    finished_at: datetime | str,
    verifier: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The record as a dict, keys in the order of the spec's example, secrets redacted; the
    command's resolved ``config`` (a run context's) follows ``parameters``."""
    kind = orchestrator.get("kind")
    if kind not in ("prefect", "direct"):
        raise UsageError(f"orchestrator kind must be 'prefect' or 'direct', not {kind!r}")
    return {
        "schema": SCHEMA,
        "command": command,
        "cache_key": cache_key,
        "inputs": [d.to_json() for d in inputs],
        "outputs": [d.to_json() for d in outputs],
        "parameters": orjson.loads(canonical_json(redact(parameters))),
        **({"config": orjson.loads(canonical_json(redact(config)))} if config is not None else {}),
        "code": code_versions(),
        "verifier": None if verifier is None else redact(verifier),
        "orchestrator": redact(orchestrator),
        "started_at": started_at if isinstance(started_at, str) else timestamp(started_at),
        "finished_at": finished_at if isinstance(finished_at, str) else timestamp(finished_at),
    }


def write_record(
    url: str, record: Mapping[str, Any], more_inputs: Iterable[FileDigest] | None = None
) -> None:
    """Write ``record`` to ``url`` atomically as indent-2 JSON; call it after every output.

    ``more_inputs`` are listed after ``record["inputs"]`` (which holds at least one), written as
    they come: a record of a million inputs without holding them, unless an observer wants the
    record whole (:func:`observing`)."""
    option = orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE  # no second copy to add the newline
    if more_inputs is not None and _observer.get() is not None:
        record = {**record, "inputs": [*record["inputs"], *(d.to_json() for d in more_inputs)]}
        more_inputs = None
    data = orjson.dumps(record, default=_json_default, option=option)
    if more_inputs is None:
        storage.write_atomic(url, data)
    else:
        storage.write_atomic_lines(url, _with_inputs(data, more_inputs))
    logger.info("wrote provenance record %s", storage.to_uri(url))
    _observed(url, record)


def _with_inputs(data: bytes, more: Iterable[FileDigest]) -> Iterator[bytes]:
    """The indent-2 record ``data`` with ``more`` inputs after its inputs, in chunks: a thousand
    inputs rendered as a list at a time, each line indented two more, as the record's list is."""
    start = data.index(b'\n  "inputs": [\n')
    end = data.index(b"\n  ]", start)  # the list's end: its items' lines are indented deeper
    yield data[:end]
    more = iter(more)
    while chunk := list(itertools.islice(more, 1000)):
        items = orjson.dumps(chunk, option=orjson.OPT_INDENT_2)[2:-2]  # without "[\n" and "\n]"
        yield b",\n  " + items.replace(b"\n", b"\n  ")
    yield data[end:]


RecordHook = Callable[[str, Mapping[str, Any]], None]
"""Called with a record's URL and the record (:func:`observing`)."""
_observer: ContextVar[RecordHook | None] = ContextVar("gymflow_record_observer", default=None)


@contextmanager
def observing(hook: RecordHook) -> Iterator[None]:
    """Call ``hook(url, record)`` for every record :func:`write_record` writes in the ``with``
    block, and every one :func:`up_to_date` finds current (the run that wrote nothing), in this
    thread and the threads started from it; an inner block's hook replaces the outer's. An error
    in the hook is logged, never raised into the run."""
    token = _observer.set(hook)
    try:
        yield
    finally:
        _observer.reset(token)


def _observed(url: str, record: Mapping[str, Any]) -> None:
    hook = _observer.get()
    if hook is None:
        return
    try:
        hook(url, record)
    except Exception as exc:  # noqa: BLE001 - an observer never fails the run that wrote the record
        logger.warning("provenance record observer failed on %s: %s", storage.to_uri(url), exc)


def read_record(url: str) -> dict[str, Any] | None:
    """The record at ``url``, or None if there is none; a malformed one is an InputError."""
    if not storage.isfile(url):
        return None
    with storage.open_read(url) as f:
        raw = f.read()
    try:
        record = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InputError.at(storage.to_uri(url), None, None, f"not a JSON provenance record: {exc}") from exc
    if not isinstance(record, dict) or record.get("schema") != SCHEMA:
        raise InputError.at(storage.to_uri(url), None, "schema", f"not a {SCHEMA} record")
    for role in ("inputs", "outputs"):
        entries = record.get(role)
        if not isinstance(entries, list) or not all(_is_entry(e) for e in entries):
            raise InputError.at(storage.to_uri(url), None, role, "must be a list of {uri, sha256, bytes}")
    return record


def _is_entry(entry: Any) -> bool:
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("uri"), str)
        and isinstance(entry.get("sha256"), str)
        and isinstance(entry.get("bytes"), int)
    )


def written_beside(record: Mapping[str, Any], record_url: str) -> str | None:
    """The directory the record was written in: that of its primary output, the listed output
    named like the record (``<stem>.provenance.json`` beside ``<stem>.*``)."""
    stem = storage.name(record_url).removesuffix(RECORD_SUFFIX)
    for entry in record.get("outputs", []):
        uri = str(entry["uri"])
        name = storage.name(uri)
        if name == stem or name.rsplit(".", 1)[0] == stem:
            return uri[: len(uri) - len(name)]
    return None


def located(entry: Mapping[str, Any], record_url: str, origin: str | None) -> str:
    """Where a listed file is checked. A file that was under the record's directory (``origin``)
    is checked at the same relative path beside the record, wherever the record is now: a copied
    or moved run directory is checked against its own files only (one missing there is missing,
    even while the original still has it). Anything else at its recorded URI."""
    uri = str(entry["uri"])
    if origin and uri.startswith(origin):
        return storage.join(storage.parent(record_url), uri[len(origin) :])
    return uri


def _check(uri: str, entry: Mapping[str, Any]) -> FileStatus:
    """Compare one listed file (now at ``uri``) with its bytes; a size mismatch skips the hashing."""
    if not storage.isfile(uri):
        return "missing"
    if storage.size(uri) != entry["bytes"]:
        return "changed"
    sha, _ = storage.sha256(uri)
    return "ok" if sha == entry["sha256"] else "changed"


def up_to_date(record_url: str, cache_key: str) -> bool:
    """Whether the record at ``record_url`` has ``cache_key`` and every output still matches it."""
    try:
        record = read_record(record_url)
    except InputError as exc:
        logger.warning("ignoring unreadable provenance record: %s", exc)
        return False
    if record is None or record.get("cache_key") != cache_key:
        return False
    origin = written_beside(record, record_url)
    for entry in record["outputs"]:
        status = _check(located(entry, record_url, origin), entry)
        if status != "ok":
            logger.info("output %s is %s since %s was written", entry["uri"], status, record_url)
            return False
    _observed(record_url, record)
    return True


def verify(record_url: str) -> list[FileCheck]:
    """Re-hash every input and output the record lists: ``ok``, ``changed`` or ``missing`` each."""
    record = read_record(record_url)
    if record is None:
        raise InputError.at(storage.to_uri(record_url), None, None, "no provenance record here")
    origin = written_beside(record, record_url)
    checks = []
    for entry in [*record["inputs"], *record["outputs"]]:
        uri = located(entry, record_url, origin)
        checks.append(FileCheck(storage.to_uri(uri), _check(uri, entry)))
    return checks
