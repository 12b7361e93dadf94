"""Output-side steps of ``prepare``: same-file safety (§1 G), fresh-run protection (§2.7), staging
for ``--resume`` (§0 G), the appenders of the output and sidecar (whole rows only, a torn last line
set aside), the keys a file holds, recovery seeding (§2.9 step 6), the duplicate line."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from contextlib import suppress

import orjson

from gymflow import lifeline, storage
from gymflow.errors import GymflowError, InputError, StorageError
from gymflow.reverify._inputs import Key, key_of
from gymflow.reverify._options import ReverifyOptions
from gymflow.reverify._paths import OutputPaths, delete, download, staged_files
from gymflow.storage_faults import scrub_url

__all__ = [
    "Appender",
    "forget_kept",
    "keys_in",
    "open_outputs",
    "protect",
    "refuse_directory",
    "refuse_same_file",
    "report_duplicates",
    "seed",
    "stage_existing",
]

Echo = Callable[[str], None]


def refuse_same_file(options: ReverifyOptions, output: str) -> None:
    """Refuse an ``--output`` that is one of the inputs (except recovery appending onto ``--rollouts``)."""
    target = storage.to_uri(output)
    named = {
        "--rollouts": options.rollouts_jsonl_fpath,
        "--inputs": options.materialized_inputs_jsonl_fpath,
        "--atif-manifest": options.atif_manifest_jsonl_fpath,
    }
    for flag, path in named.items():
        if path is None or storage.to_uri(path) != target:
            continue
        if flag == "--rollouts" and options.judge_failed_only and options.append:
            continue
        raise GymflowError(
            f"--output {output!r} is the same file as {flag}; refusing to overwrite an input. "
            "Choose another --output."
        )


def protect(output: str, sidecar: str, options: ReverifyOptions, echo: Echo) -> None:
    """Refuse an output or sidecar path that is a directory (in every mode), then fresh-run
    protection (§2.7): delete with ``--overwrite``, else refuse."""
    for url in (output, sidecar):
        refuse_directory(url)
    if options.resume_from_cache or options.append:
        return
    for local in staged_files(output):
        if not options.overwrite:
            raise GymflowError(
                f"Output file already exists: {local!r} holds rows an earlier run of {output!r} could not "
                "put there. Pass --resume to continue from them, or --overwrite to delete them and start "
                "fresh."
            )
        os.remove(local)
        echo(f"Deleted existing output file: {local!r}")
    for url in (output, sidecar):
        if storage.exists(url):
            if not options.overwrite:
                raise GymflowError(
                    f"Output file already exists: {url!r}. Pass --overwrite to delete it and start fresh, "
                    "or --resume to continue from it."
                )
            try:
                delete(url)
            except OSError as exc:
                raise StorageError(f"{scrub_url(url)}: cannot delete it: {_reason(exc)}") from None
            echo(f"Deleted existing output file: {url!r}")


def refuse_directory(url: str) -> None:
    """A local output path that names a directory is refused (never deleted, never appended to)."""
    if not storage.is_local(url):
        return
    local = url.removeprefix("file://")
    if os.path.isdir(local):
        raise GymflowError(
            f"--output {url!r} names a directory (or a sidecar path that is one); give the path of a "
            "JSONL file."
        )


def stage_existing(paths: OutputPaths, echo: Echo | None = None) -> None:
    """For a remote output, bring the existing output and sidecar into the staging directory, unless
    an earlier run left its staged files there (an upload that failed, a killed run): those hold
    every row the remote copy holds and the ones it could not put, and are continued from."""
    if not paths.remote:
        return
    kept = staged_files(paths.output)
    if kept:
        if echo is not None:
            echo(
                f"Continuing from the rows an earlier run staged in {paths.staging!r} for "
                f"{scrub_url(paths.output)!r} (its upload did not complete)."
            )
        return
    for url, local in ((paths.output, paths.local_output), (paths.sidecar, paths.local_sidecar)):
        if storage.isfile(url):
            os.makedirs(os.path.dirname(local), exist_ok=True)
            download(url, local)


RESUME_HINT = "Run the same command with --resume to continue."
_TAIL_BLOCK = 1 << 16


class Appender:
    """A JSONL file appended to row by row, holding whole rows only.

    :meth:`write` collects lines, :meth:`flush` writes them with ``os.write`` on an ``O_APPEND``
    descriptor. When a write fails (ENOSPC, EIO, a quota), the file is cut back to the end of its
    last complete row and the failure is kept as a one-line :class:`StorageError`: :meth:`flush`
    runs as an event-loop callback, where raising would only print a traceback, so the error is
    raised by the next :meth:`write` or by :meth:`close`, once.
    """

    def __init__(self, path: str, url: str) -> None:
        self.path = path
        self.url = url
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        self.fd: int | None = _opened(path, url, lambda: os.open(path, flags, 0o644))
        self.size = os.fstat(self.fd).st_size
        self.start = self.size  # what the file held before this run appended to it
        self.rows = _count_rows(path, self.size) if self.size else 0
        self.pending: list[bytes] = []
        self.error: StorageError | None = None
        self.reported = False

    def write(self, line: bytes) -> None:
        """Queue one complete line (ending in a newline)."""
        self._raise()
        self.pending.append(line)

    def flush(self) -> None:
        if self.fd is None or not self.pending or self.error is not None:
            return
        data = b"".join(self.pending)
        rows = len(self.pending)
        self.pending.clear()
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.fd, view) :]
        except OSError as exc:
            with suppress(OSError):
                os.ftruncate(self.fd, self.size)  # every row completed before stays, no torn tail
            self.error = StorageError(
                f"{scrub_url(self.url)}: cannot append a row: {_reason(exc)}; it keeps its {self.rows} "
                f"complete rows. {RESUME_HINT}"
            )
            return
        self.size += len(data)
        self.rows += rows

    def close(self) -> None:
        """Flush and close; raises the write failure if no earlier call did."""
        try:
            self.flush()
        finally:
            if self.fd is not None:
                with suppress(OSError):
                    os.close(self.fd)
                self.fd = None
        self._raise()

    def _raise(self) -> None:
        if self.error is not None and not self.reported:
            self.reported = True
            raise self.error


def _reason(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0)
    text = exc.strerror or str(exc)
    return f"{text} ({name})" if name else text


def _opened(path: str, url: str, opener: Callable[[], int]) -> int:
    """``opener()``, its OS error as one line naming ``url``."""
    try:
        return opener()
    except OSError as exc:
        raise StorageError(f"{scrub_url(url)}: cannot open it for appending: {_reason(exc)}") from None


def _count_rows(path: str, size: int) -> int:
    """Complete rows (newlines) in the first ``size`` bytes of ``path``."""
    count = 0
    with open(path, "rb") as handle:
        while block := handle.read(min(storage.CHUNK_SIZE, size - handle.tell())):
            count += block.count(b"\n")
    return count


def set_aside_torn_tail(local: str, url: str, warn: Echo) -> None:
    """Make ``local`` end with a complete row before appending to it.

    A last line without its newline is either a complete JSON row cut just after its closing brace
    (the newline is added) or a torn write (ENOSPC, a kill during a write, a file cut by hand): its
    bytes go to ``<url>.torn-<UTC time>`` beside the output, the file is cut back to its last
    complete row, and one line names both.
    """
    try:
        size = os.path.getsize(local)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StorageError(f"{scrub_url(url)}: cannot read it: {_reason(exc)}") from None
    if size == 0:
        return
    try:
        end, tail = _last_line(local, size)
    except OSError as exc:
        raise StorageError(f"{scrub_url(url)}: cannot read it: {_reason(exc)}") from None
    if not tail:
        return
    if _is_row(tail):
        _repair(url, lambda: _append_newline(local))
        return
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    torn = f"{url}.torn-{stamp}"
    storage.write_atomic(torn, tail)
    _repair(url, lambda: os.truncate(local, end))
    warn(
        f"{scrub_url(url)} ended with a partial row of {len(tail)} bytes (a write cut short); "
        f"moved it to {scrub_url(torn)} and continued from the {_count_rows(local, end)} complete rows."
    )


def _append_newline(local: str) -> None:
    with open(local, "ab") as handle:
        handle.write(b"\n")


def _repair(url: str, change: Callable[[], None]) -> None:
    try:
        change()
    except OSError as exc:
        raise StorageError(f"{scrub_url(url)}: cannot repair its last line: {_reason(exc)}") from None


def _last_line(local: str, size: int) -> tuple[int, bytes]:
    """Where the bytes after the last newline start, and those bytes."""
    with open(local, "rb") as handle:
        end = size
        tail = b""
        while end > 0:
            start = max(0, end - _TAIL_BLOCK)
            handle.seek(start)
            block = handle.read(end - start)
            cut = block.rfind(b"\n")
            if cut >= 0:
                tail = block[cut + 1 :] + tail
                end = start + cut + 1
                break
            tail = block + tail
            end = start
    return end, tail


def _is_row(data: bytes) -> bool:
    try:
        return isinstance(orjson.loads(data), dict)
    except orjson.JSONDecodeError:
        return False


_KEPT: dict[str, Callable[[], None]] = {}


def open_outputs(paths: OutputPaths, warn: Echo) -> dict[str, Appender]:
    """The local output and sidecar opened for appending (the sidecar always exists afterwards),
    each ending with a complete row (:func:`set_aside_torn_tail`). What they hold is registered for
    the CLI's interrupt line (:func:`gymflow.lifeline.add_kept`) until :func:`forget_kept`."""
    try:
        os.makedirs(os.path.dirname(os.path.abspath(paths.local_output)), exist_ok=True)
    except OSError as exc:
        raise StorageError(f"{scrub_url(paths.output)}: cannot make its directory: {_reason(exc)}") from None
    for local, url in ((paths.local_output, paths.output), (paths.local_sidecar, paths.sidecar)):
        set_aside_torn_tail(local, url, warn)
    files = {
        "output": Appender(paths.local_output, paths.output),
        "sidecar": Appender(paths.local_sidecar, paths.sidecar),
    }
    output, sidecar = files["output"], files["sidecar"]

    def describe() -> lifeline.Kept:
        where = f" (staged in {output.path!r} and {sidecar.path!r})" if paths.remote else ""
        held = (
            f"{output.rows} verified rows in {scrub_url(paths.output)!r} and {sidecar.rows} failure rows "
            f"in {scrub_url(paths.sidecar)!r}{where}"
        )
        return held, RESUME_HINT

    forget_kept(paths)
    _KEPT[paths.local_output] = lifeline.add_kept(describe)
    return files


def forget_kept(paths: OutputPaths) -> None:
    """The run finished: its outputs are no longer what an interrupted run keeps."""
    remove = _KEPT.pop(paths.local_output, None)
    if remove is not None:
        remove()


def keys_in(url: str) -> set[Key]:
    """The (task, rollout) keys of a JSONL file's rows (none when it does not exist)."""
    keys: set[Key] = set()
    if not storage.isfile(url):
        return keys
    for _, line in storage.iter_lines(url):
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        key = key_of(row) if isinstance(row, dict) else None
        if key is not None:
            keys.add(key)
    return keys


def seed(local_output: str, rollouts: str, append: Callable[[bytes], None]) -> int:
    """§2.9 step 6: append every ``--rollouts`` line whose key the output does not hold yet."""
    present = keys_in(local_output)
    count = 0
    for _, line in storage.iter_lines(rollouts):
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise InputError(f"Malformed JSON in {rollouts!r}: {exc}") from None
        key = key_of(row) if isinstance(row, dict) else None
        if key is not None:
            if key in present:
                continue
            present.add(key)
        append(line if line.endswith(b"\n") else line + b"\n")
        count += 1
    return count


def report_duplicates(duplicates: dict[Key, int], source: str | None, echo: Echo) -> None:
    if not duplicates:
        return
    keys = list(duplicates)
    shown = ", ".join(repr(k) for k in keys[:10]) + (", ..." if len(keys) > 10 else "")
    echo(
        f"Skipped {sum(duplicates.values())} duplicate rollout row(s) for {len(keys)} key(s) in "
        f"{source!r}; verified the first row of each: [{shown}]"
    )
