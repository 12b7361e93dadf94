"""How storage fails: one budget (``storage.timeout_s``) that bounds every call to an object
store, retries included, and one-line errors that name the URL without its credentials and give
the operating system's reason for a local path (what :mod:`gymflow.storage` raises for every
backend)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from gymflow.errors import GymflowError, InputError, StorageError, StorageTimeout

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


DEFAULT_TIMEOUT_S = 60.0
"""Seconds a storage operation may take, retries included, before it fails (``storage.timeout_s``):
what bounds a command against an endpoint that accepts connections and never answers."""

SETTINGS_KEY = "gymflow"
"""The entry of the storage options that holds gymflow's own settings (``timeout_s``), beside the
per-protocol fsspec options, so the budget travels wherever the options do (pool workers, flows,
tasks); no fsspec protocol has this name."""

DEFAULT_CONNECT_TIMEOUT = 10.0
"""Upper bound of the seconds to wait for an object store to accept a connection."""

DEFAULT_RETRIES = 3
"""Attempts of a request that failed transiently, with backoff between them, when the budget
leaves each attempt at least :data:`MIN_ATTEMPT_S` (fewer attempts otherwise)."""

MIN_ATTEMPT_S = 5.0
"""Seconds an attempt gets at least (connect and read timeouts together) when there are several."""

_BUDGET_SHARE = 0.9
"""Share of the budget the request's own timeouts and retries use up, so that their error (which
says what timed out) comes before the wall-clock limit's."""


def with_timeout_s(options: Mapping[str, Mapping[str, Any]], timeout_s: float) -> dict[str, dict[str, Any]]:
    """``options`` (per protocol) with the storage budget set to ``timeout_s`` seconds."""
    if not timeout_s > 0:
        raise ValueError(f"storage.timeout_s must be positive, not {timeout_s!r}")
    merged = {str(protocol): dict(values) for protocol, values in options.items()}
    merged[SETTINGS_KEY] = {**merged.get(SETTINGS_KEY, {}), "timeout_s": float(timeout_s)}
    return merged


def timeout_of(options: Mapping[str, Mapping[str, Any]]) -> float:
    """The storage budget in seconds set in ``options`` (:data:`DEFAULT_TIMEOUT_S` if none)."""
    return float(options.get(SETTINGS_KEY, {}).get("timeout_s", DEFAULT_TIMEOUT_S))


def _max_backoff(attempts: int) -> float:
    # botocore's standard retry mode sleeps up to 2**(n-1) s before attempt n + 1 (at most 20 s).
    return float(sum(min(2 ** (n - 1), 20) for n in range(1, attempts)))


def request_limits(budget: float) -> tuple[float, float, int]:
    """(connect timeout, read timeout, attempts) of one request so that all its attempts and the
    backoff between them end within :data:`_BUDGET_SHARE` of ``budget`` seconds.

    As many attempts as leave each at least :data:`MIN_ATTEMPT_S` (up to :data:`DEFAULT_RETRIES`);
    the default 60 s gives 3 attempts of 4.25 s to connect and 12.75 s to read.
    """
    usable = budget * _BUDGET_SHARE
    attempts = DEFAULT_RETRIES
    while attempts > 1 and (usable - _max_backoff(attempts)) / attempts < MIN_ATTEMPT_S:
        attempts -= 1
    per_attempt = (usable - _max_backoff(attempts)) / attempts
    connect = min(DEFAULT_CONNECT_TIMEOUT, per_attempt / 4)
    return connect, per_attempt - connect, attempts


def with_timeouts(
    protocol: str, options: dict[str, Any], budget: float = DEFAULT_TIMEOUT_S
) -> tuple[dict[str, Any], int | None]:
    """S3 options with timeouts and retries that fit in ``budget`` seconds (the user's win).

    ``connect_timeout``, ``read_timeout`` and ``retries`` (total attempts) may be given as plain
    storage options; otherwise they come from :func:`request_limits`. They become botocore's
    ``config_kwargs`` (standard retry mode: transient errors, throttling and 5xx answers are
    retried with backoff; s3fs' own loop then makes one attempt). Calls that can still take longer
    (several requests, or one that waits without reading) are cut by :func:`deadline`.
    """
    if protocol not in ("s3", "s3a"):
        return options, None
    options = dict(options)
    default_connect, default_read, default_attempts = request_limits(budget)
    connect = float(options.pop("connect_timeout", default_connect))
    read = float(options.pop("read_timeout", default_read))
    retries = max(1, int(options.pop("retries", default_attempts)))
    config = dict(options.get("config_kwargs") or {})
    config.setdefault("connect_timeout", connect)
    config.setdefault("read_timeout", read)
    config.setdefault("retries", {"total_max_attempts": retries, "mode": "standard"})
    options["config_kwargs"] = config
    return options, retries


def _is_backend_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) or _from_backend(exc)


@contextmanager
def guard(
    url: str, action: str, *, writing: bool = False, budget: float | None = None, endpoint: str = ""
) -> Iterator[None]:
    """Translate storage failures into gymflow errors that name ``url`` (without credentials).

    A missing file is an :class:`InputError` when reading; any failure to write (a missing
    bucket, a read-only or full file system, a path that is a directory...) is a
    :class:`StorageError` that gives the operating system's reason.

    ``budget`` is the ``storage.timeout_s`` in force. It is named when the endpoint did not answer
    in time, and for that long afterwards the same bucket at the same ``endpoint`` (the configured
    endpoint URL, if any) fails at once, saying so: a command that tries again, or goes on to its
    next file, then ends within one budget instead of one per operation. (A long-lived process,
    such as ``serve``, asks again once the budget has passed.)
    """
    where = _bucket(url, endpoint) if budget is not None else None
    if where is not None and budget is not None and (since := _silent_since(where, budget)) is not None:
        raise StorageTimeout(
            f"{scrub_url(url)}: cannot {action} it: the storage endpoint did not answer in time "
            f"(storage.timeout_s = {budget:g} s; not asked again: it gave no answer {since:.0f} s ago)"
        )
    try:
        yield
    except GymflowError:
        raise
    except FileNotFoundError as exc:
        if writing:
            raise StorageError(f"{scrub_url(url)}: cannot {action} it: {_explain(exc, budget, url)}") from exc
        raise InputError(
            f"{scrub_url(url)}: no such file or directory (while trying to {action} it)"
        ) from exc
    except Exception as exc:
        if not _is_backend_error(exc):
            raise
        reason = _explain(exc, budget, url)
        if _unanswered(exc):
            if where is not None:
                _note_silence(where)
            raise StorageTimeout(f"{scrub_url(url)}: cannot {action} it: {reason}") from exc
        raise StorageError(f"{scrub_url(url)}: cannot {action} it: {reason}") from exc


_silent: dict[str, float] = {}
"""When each bucket (at its endpoint) last did not answer in time (``time.monotonic()``)."""
_silent_guard = threading.Lock()


def _bucket(url: str, endpoint: str) -> str | None:
    """``scheme://bucket`` of a remote URL and the endpoint serving it (what a silent endpoint is
    remembered by); None for a local path."""
    if _is_local(url):
        return None
    parts = urlsplit(url)
    return f"{parts.scheme.lower()}://{parts.netloc.rpartition('@')[2]} at {endpoint}"


def _silent_since(where: str, budget: float) -> float | None:
    """Seconds since ``where`` last did not answer, if that is less than ``budget`` ago."""
    with _silent_guard:
        last = _silent.get(where)
        if last is None:
            return None
        since = time.monotonic() - last
        if since < budget:
            return since
        del _silent[where]
        return None


def _note_silence(where: str) -> None:
    with _silent_guard:
        _silent[where] = time.monotonic()


def _unanswered(exc: BaseException) -> bool:
    """Whether ``exc`` says the endpoint did not answer in time (not: it refused, or said no)."""
    return bool(_chain_names(exc) & set(_TIMEOUT_ERRORS + _SLOW_CONNECT_ERRORS))


def _chain_names(exc: BaseException) -> set[str]:
    return {type(item).__name__ for item in _chain(exc)}


def _chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(chain) < 8:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def os_reason(exc: OSError) -> str:
    """The operating system's words for a local failure (``Read-only file system``), with the path
    it names (a temp file, a parent directory) left out: the caller names the path it was given."""
    if exc.errno is not None and exc.strerror:
        return exc.strerror
    return " ".join(str(exc).split()) or type(exc).__name__


def _is_local(url: str) -> bool:
    match = URL_SCHEME.match(url)
    return match is None or match.group(1).lower() in ("file", "local")


def _from_backend(exc: BaseException) -> bool:
    return type(exc).__module__.split(".", 1)[0] in _BACKEND_MODULES


_CONNECT_ERRORS = (
    "EndpointConnectionError",
    "ConnectTimeoutError",
    "ClientConnectorError",
    "ConnectionError",
)
_DROPPED_ERRORS = ("ClientPayloadError", "ServerDisconnectedError", "ContentLengthError", "IncompleteRead")
"""The endpoint went away in the middle of an answer (a server stopped mid-transfer)."""
_SLOW_CONNECT_ERRORS = ("ConnectTimeoutError",)
_TIMEOUT_ERRORS = ("ReadTimeoutError", "ReadTimeout", "TimeoutError", "FSTimeoutError", "timeout")
_CREDENTIAL_CODES = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "NoCredentialsError", "ExpiredToken")


def describe_error(exc: BaseException, budget: float | None = None) -> str:
    """One line saying what a storage backend's exception means (credentials, bucket, network);
    ``budget`` as for :func:`guard`."""
    return _explain(exc, budget)


_URL_IN_TEXT = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^\s\"']+")


def _explain(exc: BaseException, budget: float | None = None, url: str = "") -> str:
    """One line saying what went wrong with a storage request on ``url``, the backend's words
    included (URLs in them without credentials); the OS's reason alone for a local path."""
    if isinstance(exc, OSError) and url and _is_local(url):
        return os_reason(exc)
    chain = _chain(exc)
    names = {type(item).__name__ for item in chain}
    text = " ".join(str(item) for item in chain)
    detail = (
        _URL_IN_TEXT.sub(lambda m: scrub_url(m.group(0)), " ".join(str(exc).split())) or type(exc).__name__
    )
    if any(code in text or code in names for code in _CREDENTIAL_CODES):
        return f"the credentials were refused or are missing ({detail})"
    if "NoSuchBucket" in text or "bucket does not exist" in text.lower():
        return f"the bucket does not exist ({detail})"
    if names & set(_TIMEOUT_ERRORS) and not names & set(_CONNECT_ERRORS[:1]):
        if budget is None:
            return f"the storage endpoint did not answer in time ({detail})"
        return f"the storage endpoint did not answer in time (storage.timeout_s = {budget:g} s; {detail})"
    if names & set(_CONNECT_ERRORS) or "Could not connect" in text:
        return f"the storage endpoint cannot be reached ({detail})"
    if names & set(_DROPPED_ERRORS):
        return f"the storage endpoint dropped the connection mid-transfer ({detail})"
    if isinstance(exc, PermissionError) or "AccessDenied" in text:
        return f"access denied: check the credentials and their permissions ({detail})"
    return detail


MIN_TRANSFER_RATE = 2**20
"""Bytes per second a transfer may not fall below: a transfer of ``n`` bytes gets
``n / MIN_TRANSFER_RATE`` seconds beyond the budget (socket timeouts only cover waiting to read, so
a blocked send, or a PUT waiting for ``100 Continue``, would otherwise wait forever)."""


def deadline(fs: Any, budget: float, nbytes: int = 0, *, one_request: bool = False) -> dict[str, float]:
    """``timeout=`` for one call of an async fsspec filesystem. Nothing for a synchronous
    filesystem (local, memory), whose methods take no such argument.

    A call that lists or inspects gets ``budget`` seconds. A transfer of ``nbytes`` (one request,
    or an upload's parts), or a call known to make ``one_request``, gets what its request timeouts
    allow, at most ``budget``, plus the time to move the bytes at :data:`MIN_TRANSFER_RATE`.
    fsspec runs the call on its own event loop and cancels it when the time is up
    (``FSTimeoutError``); an object store only shows an object once its upload is complete, so a
    cancelled write leaves nothing half-written.
    """
    if not getattr(fs, "async_impl", False):
        return {}
    if nbytes <= 0 and not one_request:
        return {"timeout": budget}
    config = getattr(fs, "config_kwargs", None) or {}
    attempts = int((config.get("retries") or {}).get("total_max_attempts", 1))
    requests = attempts * (float(config.get("connect_timeout", 0)) + float(config.get("read_timeout", 0)))
    waiting = min(budget, requests + _max_backoff(attempts)) if requests > 0 else budget
    return {"timeout": waiting + nbytes / MIN_TRANSFER_RATE}
