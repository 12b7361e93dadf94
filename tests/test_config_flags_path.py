"""A command composed with flags alone (no override, no ``$GYMFLOW_CONFIG``, no Gym file, also
for the commands that accept Gym files) is composed without OmegaConf: the same
:class:`Composed` (data, sources, keys, settings) or the same error line as through OmegaConf, for
every command's config and thousands of generated flag sets, including the values only OmegaConf
can resolve (which take its path)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from gymflow.conf import compose as compose_module
from gymflow.conf.compose import COMMANDS, USER_CONFIG_ENV, Composed, compose
from gymflow.errors import UsageError
from gymflow.frozen import thaw

NAMES = ("gymflow", *COMMANDS)
GYM_FILE_COMMANDS = ("aggregate", "post", "reverify")  # composed with gym_files=True by the CLI
CASES = [(name, False) for name in NAMES] + [(name, True) for name in GYM_FILE_COMMANDS]


@pytest.fixture(autouse=True)
def _no_user_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(USER_CONFIG_ENV, raising=False)


def _leaf_paths(value: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _leaf_paths(item, f"{prefix}{key}.")
    if prefix:
        yield prefix[:-1]


def _value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(12 if depth < 2 else 8)
    scalars: list[Any] = [
        rng.randint(-5, 10**12),
        rng.choice([0.5, -1e-7, 1e300, float("inf")]),
        rng.random() < 0.5,
        None,
        rng.choice(["", "x", "???", "a.b", "é ü", "$x", "{y}", "${oops}", "${.sibling}", "\\${esc}"]),
        str(rng.randint(0, 99)),
        rng.choice(["s3://bucket/key", "/tmp/path", "1.5"]),
        rng.randint(0, 3),
    ]
    if kind < 8:
        return scalars[kind]
    if kind < 10:
        items = [_value(rng, depth + 1) for _ in range(rng.randrange(4))]
        return tuple(items) if kind == 9 else items
    return {
        rng.choice(["a", "b", "timeout_s", "x.y"]): _value(rng, depth + 1) for _ in range(rng.randrange(3))
    }


def _flags(rng: random.Random, base: Mapping[str, Any]) -> dict[str, Any]:
    leaves = list(_leaf_paths(base))
    tops = sorted(base)
    flags: dict[str, Any] = {}
    for _ in range(rng.randrange(1, 5)):
        shape = rng.randrange(4)
        if shape == 0 or not leaves:
            key = rng.choice(tops)
        elif shape == 1:
            key = rng.choice(leaves)
        elif shape == 2:
            key = f"{rng.choice(leaves)}.{rng.choice(['new', 'x'])}"
        else:
            key = f"{rng.choice(tops)}.{rng.choice(['fresh', 'x'])}.{rng.choice(['deep', 'y'])}"
        flags[key] = _value(rng)
    return flags


def _outcome(name: str, flags: dict[str, Any], gym_files: bool = False) -> tuple[str, Any]:
    try:
        composed: Composed = compose(name, flags=flags, gym_files=gym_files)
    except UsageError as exc:
        return "error", str(exc)
    except Exception as exc:  # noqa: BLE001 - OmegaConf's own, for flags no command maps (a key through a list)
        return "raised", (type(exc).__name__, str(exc))
    return "composed", (
        thaw(composed.data),
        dict(composed.sources),
        composed.command_keys,
        composed.settings.model_dump(),
    )


def _same(left: Any, right: Any) -> bool:
    """Equal, with NaN equal to itself (repr compares floats exactly)."""
    return repr(left) == repr(right)


def _both(
    name: str, flags: dict[str, Any], monkeypatch: pytest.MonkeyPatch, gym_files: bool = False
) -> tuple[Any, Any]:
    """The outcome without OmegaConf, and the outcome through it."""
    fast = _outcome(name, flags, gym_files)
    with monkeypatch.context() as forced:
        forced.setattr(compose_module, "_flags_on", lambda base, flags: None)
        slow = _outcome(name, flags, gym_files)
    return fast, slow


@pytest.mark.parametrize(("name", "gym_files"), CASES)
def test_flags_alone_compose_as_omegaconf_does(
    name: str, gym_files: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = compose_module._compose_packaged(name, [])
    rng = random.Random(f"flags-{name}")
    plain_taken = 0
    for _ in range(300):
        flags = _flags(rng, base)
        if gym_files and rng.random() < 0.3:
            flags["config_paths"] = rng.choice([[], (), None, ""])  # no Gym file named
        fast, slow = _both(name, flags, monkeypatch, gym_files)
        assert _same(fast, slow), (flags, fast, slow)
        plain_taken += compose_module._flags_on(base, flags) is not None
    assert plain_taken > 60  # a good share of the flag sets took the path under test


@pytest.mark.parametrize(
    "flags",
    [
        {"storage": {"timeout_s": 5}},  # a block set whole replaces the packaged one
        {"storage.options": {"s3": {"anon": True, "key": "k"}}},
        {"storage.options.s3": {"client_kwargs": {"region_name": "x"}}},  # a key the block lacks
        {"prefect": {"port": 4300, "log_level": "INFO"}, "prefect.port": 4301},
        {"workers": 3, "ignore_checks": ("a", "b"), "json": True},
    ],
)
def test_valid_flags_compose_as_omegaconf_does(
    flags: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    fast, slow = _both("health_check", flags, monkeypatch)
    assert fast[0] == "composed" and compose_module._flags_on(
        compose_module._compose_packaged("health_check", []), flags
    )
    assert _same(fast, slow), (fast, slow)


@pytest.mark.parametrize(
    ("flags", "plain"),
    [
        ({"workers": 2}, True),
        ({"storage.timeout_s": 5, "storage.options": {"anon": True}}, True),
        ({"workers": "${storage.timeout_s}"}, False),  # an interpolation: OmegaConf resolves it
        ({"workers": ("a", 1)}, True),  # a tuple becomes a list, as OmegaConf makes it
        ({"workers": {1: "x"}}, False),  # a key that is not a string
        ({"workers": object()}, False),
        ({"workers.x": 1}, False),  # through a value that is not a block
        ({"storage.options": None, "storage.options.x": 1}, False),
    ],
)
def test_which_flags_go_without_omegaconf(flags: dict[str, Any], plain: bool) -> None:
    base = compose_module._compose_packaged("health_check", [])
    merged = compose_module._flags_on(base, flags)
    assert (merged is not None) == plain
    if merged is not None and "workers" in flags:
        assert merged["workers"] == (
            list(flags["workers"]) if type(flags["workers"]) is tuple else flags["workers"]
        )
        assert type(merged["workers"]) is type(flags["workers"]) or type(flags["workers"]) is tuple


def test_flags_alone_do_not_import_omegaconf() -> None:
    probe = (
        "import sys\n"
        "from gymflow.conf.compose import compose\n"
        "composed = compose('health_check', flags={'workers': 2})\n"
        "assert composed.data['workers'] == 2\n"
        "composed = compose('aggregate', flags={'input_glob': 'a/*.jsonl'}, gym_files=True)\n"
        "assert composed.data['input_glob'] == 'a/*.jsonl' and not composed.data['config_paths']\n"
        "print('omegaconf' in sys.modules, 'hydra' in sys.modules)\n"
    )
    env = {key: value for key, value in os.environ.items() if key != USER_CONFIG_ENV}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env
    ).stdout
    assert out.split()[0] == "False", out
