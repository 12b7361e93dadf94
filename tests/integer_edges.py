"""Texts around the integers orjson reads as floats (beyond uint64, below int64), for the tests of
what must read such a line exactly."""

from __future__ import annotations

import json
import random

import orjson

EDGES = [
    b"18446744073709551615", b"18446744073709551616", b"-9223372036854775808",
    b"-9223372036854775809", b"99999999999999999999", b"100000000000000000000",
]  # fmt: skip


def texts(rng: random.Random, count: int) -> list[bytes]:
    """``count`` small objects, each with an integer near the edges in an array and one in a string."""
    out = []
    for _ in range(count):
        number = rng.choice(EDGES) if rng.random() < 0.5 else (
            (b"-" if rng.random() < 0.5 else b"")
            + str(rng.randrange(1, 10)).encode()
            + bytes(rng.choice(b"0123456789") for _ in range(rng.randrange(16, 24)))
        )  # fmt: skip
        out.append(b'{"a":[1.5,' + number + b'],"s":"' + rng.choice(EDGES) + b'"}')
    return out


def orjson_inexact(data: bytes) -> bool:
    """Whether orjson reads some number of ``data`` differently from the json module."""
    try:
        return repr(orjson.loads(data)) != repr(json.loads(data))  # 2.0**64 == 2**64: compare types too
    except ValueError:
        return False
