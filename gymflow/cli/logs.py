"""Logging for the commands' ``-v``: one handler on stderr, set up once by the CLI.

HTTP clients log every request at INFO (Prefect's API client talks to its server dozens of times
per run); they stay at WARNING, so ``-v`` shows what gymflow and Prefect did, not each request.
"""

from __future__ import annotations

import logging

FORMAT = "%(levelname)s %(name)s: %(message)s"
QUIET_LOGGERS = ("httpx", "httpcore", "hpack", "aiohttp.access", "botocore", "aiobotocore", "s3fs")
"""Loggers kept at WARNING even with ``-v``: one line per request or connection."""


def configure_logging(verbose: bool) -> None:
    """INFO with ``verbose``, else WARNING, on stderr; the per-request loggers at WARNING."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format=FORMAT)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
