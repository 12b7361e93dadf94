"""Join tests read captures through the real ``CaptureStore`` over fsspec's ``memory://``
(``tests.join.helpers.store``), emptied around every test by the ``memfs`` fixture."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _memory_capture(memfs: str) -> str:
    return memfs
