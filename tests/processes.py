"""The processes a test started, for the tests that assert none is left behind."""

from __future__ import annotations

import psutil


def pool_workers(parent: psutil.Process | None = None) -> list[psutil.Process]:
    """The ``multiprocessing`` workers among the descendants of ``parent`` (default: this
    process): spawned ones run ``spawn_main``; forked ones show their parent's command line."""
    parent = parent or psutil.Process()
    found = []
    try:
        own = parent.cmdline()
        children = parent.children(recursive=True)
    except psutil.Error:
        return []
    for child in children:
        try:
            line = child.cmdline()
        except psutil.Error:
            continue
        if any("spawn_main" in part for part in line) or line == own:
            found.append(child)
    return found
