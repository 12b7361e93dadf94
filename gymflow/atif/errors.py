"""The one exception ATIF input raises: a clean user error (``Error: <message>``, exit 1)."""

from __future__ import annotations

from gymflow.errors import InputError


class AtifError(InputError):
    """An ATIF manifest, materialized input or trajectory cannot be projected; nothing was written."""
