"""gymflow's exception tree.

GymflowError                 root: every expected failure; the CLI prints it without a traceback
├── UsageError               a command was called wrongly (exit 2, usage printed)
├── InputError               an input file is missing or malformed (names file, line, field)
├── StorageError             a storage backend failed (names the URL)
│   └── StorageTimeout       it did not answer within storage.timeout_s, retries included
└── UnknownCheckError        a health check id is not registered (UsageError too)
"""

from __future__ import annotations


class GymflowError(Exception):
    """Root of every failure gymflow expects and explains."""


class UsageError(GymflowError):
    """The command line or library call is wrong; nothing was read or written."""


class InputError(GymflowError):
    """An input is missing or malformed."""

    @classmethod
    def at(cls, uri: str, line: int | None, field: str | None, message: str) -> InputError:
        where = uri if line is None else f"{uri}:{line}"
        if field:
            where = f"{where}: field {field!r}"
        return cls(f"{where}: {message}")


class StorageError(GymflowError):
    """A storage backend (local disk, S3, memory) failed."""


class StorageTimeout(StorageError):
    """The storage endpoint did not answer within ``storage.timeout_s``, its own retries
    included: trying again would only spend the budget again."""


class UnknownCheckError(UsageError):
    """A health check id is not registered."""
