"""Reading ATIF inputs through :mod:`gymflow.storage`, failures worded as reverify.md §3.2-§3.4 does."""

from __future__ import annotations

from collections.abc import Iterator

from gymflow import storage
from gymflow.atif.errors import AtifError
from gymflow.errors import GymflowError


def _reason(exc: BaseException) -> str:
    """The operating-system error behind a storage failure when there is one, else its message."""
    cause = exc.__cause__
    return str(cause) if isinstance(cause, OSError) else str(exc)


def read_bytes(url: str, what: str) -> bytes:
    """All bytes of ``url``; ``could not read <what> <url>: <err>`` on failure."""
    try:
        with storage.open_read(url) as f:
            return f.read()
    except (GymflowError, OSError) as exc:
        raise AtifError(f"could not read {what} {url}: {_reason(exc)}") from exc


def iter_lines(url: str, what: str) -> Iterator[tuple[int, bytes]]:
    """``(physical line number from 1, line bytes without terminator)`` for every line of ``url``."""
    lines = storage.iter_lines(url)
    number = 0
    while True:
        try:
            _, line = next(lines)
        except StopIteration:
            return
        except (GymflowError, OSError) as exc:
            raise AtifError(f"could not read {what} {url}: {_reason(exc)}") from exc
        number += 1
        if line.endswith(b"\n"):
            line = line[:-1]
            if line.endswith(b"\r"):
                line = line[:-1]
        yield number, line
