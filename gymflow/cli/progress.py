"""A byte-count progress bar on stderr, shown only on a terminal (never in CI or when piped)."""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

MIN_BYTES = 8 * 2**20
"""Smaller inputs (a few thousand rows at most) finish before a bar would help."""


class ProgressBar:
    def __init__(self, total: int, label: str, stream: TextIO) -> None:
        self.total = max(total, 1)
        self.label = label
        self.stream = stream
        self.done = 0
        self.started = time.monotonic()
        self.shown = 0.0

    def __call__(self, advance: int) -> None:
        self.done += advance
        now = time.monotonic()
        if now - self.shown >= 0.1 or self.done >= self.total:
            self.shown = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        fraction = min(self.done / self.total, 1.0)
        filled = int(fraction * 30)
        self.stream.write(
            f"\r{self.label} [{'#' * filled}{'.' * (30 - filled)}] {fraction:4.0%} "
            f"{self.done / 2**20:,.0f}/{self.total / 2**20:,.0f} MiB {now - self.started:5.1f}s"
        )
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\r\x1b[2K")
        self.stream.flush()


def progress_bar(total: int, label: str) -> ProgressBar | None:
    """A bar for ``total`` bytes, or ``None`` when it should stay quiet."""
    stream = sys.stderr
    if total < MIN_BYTES or os.environ.get("CI") or not stream.isatty():
        return None
    return ProgressBar(total, label, stream)


class RowProgress:
    """A row-count bar: rows done, rows/s and failures so far (``eval reverify``)."""

    def __init__(self, label: str, stream: TextIO) -> None:
        self.label = label
        self.stream = stream
        self.started = time.monotonic()
        self.shown = 0.0

    def __call__(self, done: int, failures: int, total: int) -> None:
        now = time.monotonic()
        if now - self.shown < 0.1 and done < total:
            return
        self.shown = now
        fraction = min(done / max(total, 1), 1.0)
        filled = int(fraction * 30)
        rate = done / max(now - self.started, 1e-9)
        self.stream.write(
            f"\r{self.label} [{'#' * filled}{'.' * (30 - filled)}] {fraction:4.0%} {done:,}/{total:,} rows "
            f"{rate:,.1f} rows/s {failures:,} failed"
        )
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\r\x1b[2K")
        self.stream.flush()


def row_progress(label: str) -> RowProgress | None:
    """A row bar on stderr, or ``None`` when not on a terminal or ``CI`` is set."""
    stream = sys.stderr
    if os.environ.get("CI") or not stream.isatty():
        return None
    return RowProgress(label, stream)
