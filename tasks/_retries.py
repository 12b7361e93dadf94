"""The retry settings of every I/O task (reading or writing storage), in one place.

Storage hiccups (an S3 throttle, a dropped connection) are retried with backoff; pure computation
is not retried: rerunning it would fail the same way. Tasks unpack :data:`IO_RETRIES` into
``@task``/``@materialize``; the ``TypedDict`` keeps the decorators' types intact under mypy.
"""

from __future__ import annotations

from typing import Final, TypedDict

__all__ = ["IO_RETRIES", "RetrySettings"]


class RetrySettings(TypedDict):
    """The retry keywords of ``prefect.task`` that gymflow sets."""

    retries: int
    retry_delay_seconds: list[float]


IO_RETRIES: Final[RetrySettings] = {"retries": 3, "retry_delay_seconds": [1, 4, 10]}
"""Three retries, after 1, 4 and 10 seconds."""
