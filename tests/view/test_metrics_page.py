"""The metrics page shows each agent's first GROUP_ROWS groups and says how many the file holds."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from gymflow.aggregate import _metrics_reading
from gymflow.view import load_run, server_page
from tests.aggregate.test_metrics_reading import _entries


def test_the_metrics_page_says_how_many_groups_it_leaves_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_metrics_reading, "GROUP_ROWS", 4)
    run = tmp_path / "run"
    run.mkdir()
    (run / "rollouts_aggregate_metrics.json").write_bytes(
        orjson.dumps(_entries([9, 3]), option=orjson.OPT_INDENT_2)
    )
    page = server_page(load_run(str(run)), "metrics")
    assert page.count("The first 4 of 9 groups") == 1
    assert "of 3 groups" not in page
    assert "<tr><td>3</td>" in page and "<tr><td>4</td>" not in page  # tasks 0-3 of the first agent
