"""Reading the asset events Prefect's local API stored (its SQLite database), for flow tests."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path


def asset_events(path: Path, wait_s: float = 15.0) -> list[str]:
    """Asset events stored for ``path`` (its ``file://`` URI as the resource id).

    The server persists events in batches after the command has returned, so this waits (bounded)
    for the first one to arrive."""
    from prefect.settings import get_current_settings

    url = get_current_settings().server.database.connection_url
    assert url is not None
    database = url.get_secret_value().split("///", 1)[1]
    deadline = time.monotonic() + wait_s
    while True:
        with sqlite3.connect(database) as connection:
            rows = connection.execute(
                "select event from events where resource_id = ? and event like 'prefect.asset.%'",
                (path.as_uri(),),
            )
            events = [row[0] for row in rows]
        if events or time.monotonic() > deadline:
            return events
        time.sleep(0.2)
