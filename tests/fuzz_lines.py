"""Seeded generators of JSONL rollout lines and their mutations, for the exactness property tests.

:func:`mutate` damages a line the ways hostile or broken writers do: flipped, inserted and deleted
bytes, truncation, number literals swapped for huge, tiny or long ones, invalid UTF-8 and control
bytes or escapes inside strings, duplicate keys, changed field types, deep nesting, and bytes
around the document.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

from gymflow.jsonline import BOM

SEED = 20_240_611
WORDS = ["alpha", "β-gamma", "δ", "日本語", "emoji \U0001f600", 'quo"te', "back\\slash", "tab\tnew\nline", ""]
NUMBERS = [
    "0", "-0", "7", "-12", "3.25", "-0.0", "1e5", "1E+2", "2.5e-05", "6.02e23", "1e99", "-1e-99",
    "9223372036854775807", "9223372036854775808", "18446744073709551615", "18446744073709551616",
    "-9223372036854775809", "123456789012345678901234567890", "1" * 199, "1" * 200, "1" * 330,
    "1" * 400, "1e400", "-1e400", "1E308", "1.7976931348623157e308", "1.8e308", "1e-400",
    "4.9e-324", "1e+400", "2E+308", "1e+99", "1e0099", "0.5e999", "1" * 250 + ".5",
    "1" * 150 + "e99", "12e3456",
]  # fmt: skip
BAD_BYTES = [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe6\x97", b"\xf4\x90\x80\x80", b"\x00", b"\x01"]
ESCAPES = [b"\\ud800", b"\\udc00", b"\\ud800\\u0041", b"\\ud83d\\ude00", b"\\u0000", b"\\q", b"\\u12g4"]
HEX = "0123456789abcdef"
DUPLICATED = [b'"reward":', b'"usage":', b'"_ng_task_index":', b'"output_tokens":', b'"name":']
RETYPED = [b'"_ng_task_index":', b'"reward":', b'"response":', b'"usage":', b'"agent_ref":', b'"ng_perf":']
ODD_VALUES = [b'"3"', b"3.0", b"true", b"false", b"null", b"[]", b"{}", b"[1,{}]", b'{"name":7}', b"-1"]


def scalar(rng: random.Random) -> Any:
    kind = rng.random()
    if kind < 0.3:
        return rng.choice(WORDS) + "".join(rng.choice(HEX) for _ in range(rng.randrange(30)))
    if kind < 0.5:
        return rng.randrange(-(10**6), 10**6)
    if kind < 0.7:
        return rng.uniform(-1e6, 1e6) * 10 ** rng.randrange(-30, 30)
    if kind < 0.8:
        return rng.choice([True, False, None])
    return rng.choice([2**63, 2**64, -(2**63) - 1, 10**25, 0.1, 1e-300])


def value(rng: random.Random, depth: int = 0) -> Any:
    if depth > 3 or rng.random() < 0.5:
        return scalar(rng)
    if rng.random() < 0.5:
        return [value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(WORDS) + str(i): value(rng, depth + 1) for i in range(rng.randrange(4))}


def row(rng: random.Random) -> dict[str, Any]:
    """A rollout-like row: identity, agent, usage, perf, reward, answers and random payloads."""
    out: dict[str, Any] = {"_ng_task_index": rng.randrange(50), "_ng_rollout_index": rng.randrange(4)}
    if rng.random() < 0.7:
        out["agent_ref"] = {"name": rng.choice(["mcqa_agent", "math_agent", ""])}
    if rng.random() < 0.2:
        out["_ng_environment_server"] = rng.choice(["env_a", "env_b", ""])
    for i in range(rng.randrange(1, 6)):
        out[f"k{i}"] = value(rng)
    usage = {"output_tokens": rng.randrange(100), "input_tokens": scalar(rng), "details": {"r": 1}}
    out["response"] = {"id": "resp_3e412", "output": [value(rng)], "usage": usage}
    if rng.random() < 0.5:
        out["ng_perf"] = {"num_turns": rng.randrange(4), "completion_tokens": scalar(rng)}
    if rng.random() < 0.3:
        out["mask_sample"] = rng.choice([True, False, 0, 1, "", "yes", [], [0]])
    out["reward"] = scalar(rng)
    out["extracted_answer"] = rng.choice(["A", "B", 3, None, [1, "x"], {"b": 1, "a": 2}])
    return out


def dumps(row: dict[str, Any], rng: random.Random) -> bytes:
    """``row`` as one line, compact or with spaces, ASCII-escaped or not."""
    separators = (",", ":") if rng.random() < 0.5 else None
    return json.dumps(row, ensure_ascii=rng.random() < 0.3, separators=separators).encode()


def _number_span(data: bytearray, rng: random.Random) -> tuple[int, int] | None:
    digits = [i for i, byte in enumerate(data) if 0x30 <= byte <= 0x39]
    if not digits:
        return None
    start = end = rng.choice(digits)
    while start > 0 and data[start - 1] in b"0123456789.eE+-":
        start -= 1
    while end < len(data) and data[end] in b"0123456789.eE+-":
        end += 1
    return start, end


def mutate(line: bytes, rng: random.Random) -> bytes:
    """``line`` damaged one to three times (see the module docstring)."""
    data = bytearray(line)
    for _ in range(rng.randint(1, 3)):
        if not data:
            break
        kind = rng.randrange(12)
        at = rng.randrange(len(data) + 1)
        if kind == 0:  # flip a byte
            data[min(at, len(data) - 1)] = rng.randrange(256)
        elif kind == 1:  # insert a byte
            data[at:at] = bytes([rng.randrange(256)])
        elif kind == 2:  # truncate
            del data[at:]
        elif kind == 3:  # delete a span
            del data[at : at + rng.randrange(1, 8)]
        elif kind in (4, 5):  # a number literal replaced
            span = _number_span(data, rng)
            if span is not None:
                data[span[0] : span[1]] = rng.choice(NUMBERS).encode()
        elif kind == 6:  # invalid UTF-8 or a control byte inside a string
            quote = data.find(b'"', at)
            if quote >= 0:
                data[quote + 1 : quote + 1] = rng.choice(BAD_BYTES)
        elif kind == 7:  # an escape inside a string
            quote = data.find(b'"', at)
            if quote >= 0:
                data[quote + 1 : quote + 1] = rng.choice(ESCAPES)
        elif kind == 8:  # a key duplicated (top level or nested)
            key = rng.choice(DUPLICATED)
            place = data.find(b"{", at)
            if place >= 0:
                data[place + 1 : place + 1] = key + rng.choice(ODD_VALUES) + b","
        elif kind == 9:  # a field's type changed
            key = rng.choice(RETYPED)
            where = data.find(key)
            if where >= 0:
                start = end = where + len(key)
                while end < len(data) and data[end] not in b",}":
                    end += 1
                data[start:end] = rng.choice(ODD_VALUES)
        elif kind == 10:  # deep nesting
            levels = rng.choice([990, 1000, 1023, 1024, 1025])
            place = data.find(b":", at)
            if place >= 0:
                data[place + 1 : place + 1] = b"[" * levels + b"0" + b"]" * levels + b","
        else:  # what surrounds the document
            data = bytearray(rng.choice([BOM, b" ", b"\t", b"\x0c", b"[", b""]) + bytes(data))
            data += rng.choice([b"\n", b" \r\n", b"x", b"]", b""])
    return bytes(data)


def lines(count: int, seed: int, intact: float = 0.15) -> list[bytes]:
    """``count`` lines, a share ``intact`` of them left whole and the rest mutated."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        line = dumps(row(rng), rng)
        out.append(line if rng.random() < intact else mutate(line, rng))
    return out


def typed(item: Any) -> Any:
    """``item`` with every scalar tagged by its type (1, 1.0 and True compare unequal)."""
    if isinstance(item, dict):
        return ("dict", [(key, typed(child)) for key, child in item.items()])
    if isinstance(item, list):
        return ("list", [typed(child) for child in item])
    if isinstance(item, float):
        return ("float", math.copysign(1.0, item), repr(item))
    return (type(item).__name__, item)
