"""``gymflow.collector.release_memory``: the heap a finished step freed goes back to the system."""

from __future__ import annotations

import subprocess
import sys

import pytest

_PROGRAM = """
from gymflow.collector import release_memory

def rss_mb():
    with open("/proc/self/status") as status:
        return int(status.read().split("VmRSS:")[1].split()[0]) // 1024

rows = [bytes(2000) + bytes([i % 256]) for i in range(40_000)]  # 80 MB of the C heap
pinned = bytes(3000) + b"x"  # above them: free() alone cannot shrink the heap
grown = rss_mb()
del rows
freed = rss_mb()
release_memory()
print(grown, freed, rss_mb())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; malloc_trim is glibc's")
def test_memory_freed_by_a_step_leaves_the_process() -> None:
    out = subprocess.run([sys.executable, "-c", _PROGRAM], capture_output=True, text=True, check=True)
    grown, freed, released = map(int, out.stdout.split())
    assert freed > grown - 10  # freed, yet still held by the process
    assert released < freed - 60
