"""Frozen option mappings: immutable, picklable (process pools), and still plain JSON."""

from __future__ import annotations

import json
import pickle
from concurrent.futures import ProcessPoolExecutor

import orjson
import pytest

from gymflow.frozen import FrozenDict, freeze, thaw
from gymflow.pipeline import PostOptions


def _keys(mapping: FrozenDict[str, object]) -> list[str]:
    return sorted(mapping)


def test_freeze_is_deep_and_refuses_every_mutation() -> None:
    frozen = freeze({"servers": {"mcqa": {"ports": [1, 2]}}})
    inner = frozen["servers"]["mcqa"]
    assert inner["ports"] == (1, 2)
    for mutate in (
        lambda: frozen.__setitem__("x", 1),
        lambda: inner.update(a=1),
        lambda: frozen.pop("servers"),
        lambda: frozen.setdefault("y", 2),
        lambda: frozen.clear(),
        lambda: frozen.__delitem__("servers"),
    ):
        with pytest.raises(TypeError, match="immutable"):
            mutate()
    assert frozen == {"servers": {"mcqa": {"ports": (1, 2)}}}
    assert thaw(frozen) == {"servers": {"mcqa": {"ports": [1, 2]}}}
    assert isinstance(thaw(frozen)["servers"], dict) and not isinstance(thaw(frozen)["servers"], FrozenDict)


def test_frozen_values_serialise_as_plain_json_and_cross_processes() -> None:
    frozen = freeze({"b": [1, {"c": "d"}], "a": None})
    assert orjson.dumps(frozen) == b'{"b":[1,{"c":"d"}],"a":null}'
    assert json.dumps(frozen) == '{"b": [1, {"c": "d"}], "a": null}'
    copy = pickle.loads(pickle.dumps(frozen))
    assert copy == frozen and type(copy) is FrozenDict and type(copy["b"][1]) is FrozenDict
    assert hash(copy) == hash(frozen)
    with ProcessPoolExecutor(1) as pool:
        assert pool.submit(_keys, frozen).result() == ["a", "b"]


def test_post_options_freeze_the_gym_config_they_are_given() -> None:
    given = {"mcqa": {"resources_servers": {"mcqa": {"host": "127.0.0.1"}}}}
    options = PostOptions(run="run", gym_config=given)
    given["mcqa"]["resources_servers"]["mcqa"]["host"] = "changed"
    assert options.gym_config["mcqa"]["resources_servers"]["mcqa"]["host"] == "127.0.0.1"
    with pytest.raises(TypeError):
        options.gym_config["mcqa"]["x"] = 1  # type: ignore[index]
    assert pickle.loads(pickle.dumps(options)) == options
