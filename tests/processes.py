"""The processes a test started, for the tests that assert none is left behind."""

from __future__ import annotations

import psutil


def pool_workers() -> list[psutil.Process]:
    """This process's descendants that are ``multiprocessing`` spawn workers."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if any("spawn_main" in part for part in child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found
