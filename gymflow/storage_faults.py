"""How storage fails: bounded timeouts and retries for object stores, and one-line errors that
name the URL without its credentials (what :mod:`gymflow.storage` raises for every backend)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from gymflow.errors import GymflowError, InputError, StorageError

URL_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")
"""``scheme://`` at the start of a URL (a string without one is a local path)."""
_SECRET_NAME = re.compile(r"key|secret|token|password|credential|authorization|signature", re.IGNORECASE)
_SECRET_QUERY_NAMES = frozenset({"sig", "x-amz-security-token", "awsaccesskeyid"})
_BACKEND_MODULES = frozenset({"botocore", "aiobotocore", "aiohttp", "s3fs", "fsspec"})


def is_secret_name(name: str) -> bool:
    """Whether a parameter or query-string name looks like it holds a secret."""
    return bool(_SECRET_NAME.search(name)) or name.lower() in _SECRET_QUERY_NAMES


def scrub_url(url: str) -> str:
    """``url`` without user-info or secret-looking query parameters (unchanged if it has none)."""
    if URL_SCHEME.match(url) is None:
        return url
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    kept = [p for p in parts.query.split("&") if p and not is_secret_name(p.partition("=")[0])]
    query = "&".join(kept)
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


DEFAULT_CONNECT_TIMEOUT = 10.0
"""Seconds to wait for an object store to accept a connection (``connect_timeout`` option)."""

DEFAULT_READ_TIMEOUT = 60.0
"""Seconds to wait for any answer on an open connection (``read_timeout`` option)."""

DEFAULT_RETRIES = 3
"""Attempts of a request that failed transiently (``retries`` option), with backoff between them."""

_TIMEOUT_KEYS = ("connect_timeout", "read_timeout", "retries")


def with_timeouts(protocol: str, options: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
    """S3 options with gymflow's bounded timeouts and retries filled in (the user's win).

    ``connect_timeout``, ``read_timeout`` and ``retries`` (total attempts) may be given as plain
    storage options; they become botocore's ``config_kwargs`` (standard retry mode: transient
    errors, throttling and 5xx answers are retried with backoff; s3fs' own loop then makes one
    attempt), so no request hangs longer than ``retries`` x (``connect_timeout`` +
    ``read_timeout``) plus backoff.
    """
    if protocol not in ("s3", "s3a"):
        return options, None
    options = dict(options)
    connect = float(options.pop("connect_timeout", DEFAULT_CONNECT_TIMEOUT))
    read = float(options.pop("read_timeout", DEFAULT_READ_TIMEOUT))
    retries = max(1, int(options.pop("retries", DEFAULT_RETRIES)))
    config = dict(options.get("config_kwargs") or {})
    config.setdefault("connect_timeout", connect)
    config.setdefault("read_timeout", read)
    config.setdefault("retries", {"max_attempts": retries, "mode": "standard"})
    options["config_kwargs"] = config
    return options, retries


def _is_backend_error(exc: BaseException) -> bool:
    module = type(exc).__module__.split(".", 1)[0]
    return isinstance(exc, OSError) or module in _BACKEND_MODULES


@contextmanager
def guard(url: str, action: str, *, writing: bool = False) -> Iterator[None]:
    """Translate storage failures into gymflow errors that name ``url`` (without credentials).

    A missing file is an :class:`InputError` when reading; any failure to write (a missing
    bucket included) is a :class:`StorageError`.
    """
    try:
        yield
    except GymflowError:
        raise
    except FileNotFoundError as exc:
        if writing:
            raise StorageError(f"{scrub_url(url)}: cannot {action} it: {exc}") from exc
        raise InputError(
            f"{scrub_url(url)}: no such file or directory (while trying to {action} it)"
        ) from exc
    except Exception as exc:
        if not _is_backend_error(exc):
            raise
        raise StorageError(f"{scrub_url(url)}: cannot {action} it: {_explain(exc)}") from exc


_CONNECT_ERRORS = (
    "EndpointConnectionError",
    "ConnectTimeoutError",
    "ClientConnectorError",
    "ConnectionError",
)
_TIMEOUT_ERRORS = ("ReadTimeoutError", "ReadTimeout", "TimeoutError", "FSTimeoutError", "timeout")
_CREDENTIAL_CODES = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "NoCredentialsError", "ExpiredToken")


def describe_error(exc: BaseException) -> str:
    """One line saying what a storage backend's exception means (credentials, bucket, network)."""
    return _explain(exc)


def _explain(exc: BaseException) -> str:
    """One line saying what went wrong with a storage request, the backend's words included."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(chain) < 8:
        chain.append(current)
        current = current.__cause__ or current.__context__
    names = {type(item).__name__ for item in chain}
    text = " ".join(str(item) for item in chain)
    detail = " ".join(str(exc).split()) or type(exc).__name__
    if any(code in text or code in names for code in _CREDENTIAL_CODES):
        return f"the credentials were refused or are missing ({detail})"
    if "NoSuchBucket" in text or "bucket does not exist" in text.lower():
        return f"the bucket does not exist ({detail})"
    if names & set(_TIMEOUT_ERRORS) and not names & set(_CONNECT_ERRORS[:1]):
        return f"the storage endpoint did not answer in time ({detail})"
    if names & set(_CONNECT_ERRORS) or "Could not connect" in text:
        return f"the storage endpoint cannot be reached ({detail})"
    if isinstance(exc, PermissionError) or "AccessDenied" in text:
        return f"access denied: check the credentials and their permissions ({detail})"
    return detail


MIN_UPLOAD_RATE = 2**20
"""Bytes per second an upload may not fall below: what bounds a write to a store that stopped
reading (socket timeouts only cover reads, so a blocked send would otherwise wait forever)."""


def upload_deadline(fs: Any, nbytes: int) -> dict[str, float]:
    """``timeout=`` for an upload through an async fsspec filesystem (none for the others)."""
    if not getattr(fs, "async_impl", False):
        return {}
    config = getattr(fs, "config_kwargs", None) or {}
    connect = float(config.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT))
    read = float(config.get("read_timeout", DEFAULT_READ_TIMEOUT))
    retries = config.get("retries", {}).get("max_attempts", DEFAULT_RETRIES)
    return {"timeout": int(retries) * (connect + read) + nbytes / MIN_UPLOAD_RATE}
