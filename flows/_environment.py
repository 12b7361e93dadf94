"""Prefect's process environment, set before Prefect is first imported.

No server is needed: without ``PREFECT_API_URL`` Prefect starts its ephemeral local API (SQLite
under ``$PREFECT_HOME``), so runs are kept and ``prefect server start`` shows them later.
"""

from __future__ import annotations

import os

from gymflow.config import PrefectConfig


def prepare(config: PrefectConfig, verbose: bool) -> None:
    """Quiet, offline-safe defaults; the user's own environment variables win."""
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault(
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", str(config.startup_timeout_seconds)
    )
    if not verbose:
        # Dask's cluster logs (runner.kind: dask) at INFO would flood the terminal.
        os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    if verbose:
        os.environ["PREFECT_LOGGING_LEVEL"] = "INFO"
    else:
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", config.log_level)
