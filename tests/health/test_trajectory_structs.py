"""The generated Structs (``gymflow.evidence.structs``) are the trajectory models, field for field.

Names, order, required fields, defaults and unknown-key handling are pinned directly; types,
constraints and validators by probing every field of a complete valid trajectory with values of
every JSON type: whatever the fast path accepts, pydantic accepts with equal values.
"""

from __future__ import annotations

import json
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import msgspec
import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gymflow.evidence import TrajectoryModelCall, TrajectoryRecord, structs
from gymflow.evidence.structs import STRUCTS, convert_trajectory
from gymflow.evidence.trajectory import AgentInvocation
from tests.value_paths import with_value_at

_PROBES: list[Any] = [
    None, True, False, 0, 1, -1, 2, 1.0, 1.5, -0.5, "", "s", "1", "yes", "responses_api_models",
    "1.0", [], [{}], {}, {"type": "responses_api_models", "name": "n", "x": 1},
]  # fmt: skip


def _models(model: type[BaseModel]) -> set[type[BaseModel]]:
    found = {model}
    for info in model.model_fields.values():
        for nested in _nested(info.annotation):
            found |= _models(nested)
    return found


def _nested(tp: Any) -> list[type[BaseModel]]:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    return [model for arg in get_args(tp) for model in _nested(arg)]


def _value(tp: Any) -> Any:
    """A valid non-null value of ``tp`` (the first non-None member of a union)."""
    if get_origin(tp) is Annotated:
        return _value(get_args(tp)[0]) + 1
    if get_origin(tp) in (Union, types.UnionType):
        return _value(next(arg for arg in get_args(tp) if arg is not type(None)))
    if get_origin(tp) is Literal:
        return get_args(tp)[0]
    if get_origin(tp) is list:
        return [_value(get_args(tp)[0])]
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return _sample(tp)
    return {str: "s", int: 1, float: 1.0, bool: True}.get(tp, {"free": ["form"]})


def _sample(model: type[BaseModel]) -> dict[str, Any]:
    """Every field set (ids equal, so the record-level rules hold)."""
    out = {}
    for name, info in model.model_fields.items():
        value = _value(info.annotation)
        if info.metadata:  # ``ge`` bounds: the bound itself
            value = info.metadata[0].ge
        out[name] = value
    return out


def _field_paths(
    model: type[BaseModel], value: dict[str, Any], path: tuple[Any, ...] = ()
) -> list[tuple[Any, ...]]:
    paths = []
    for name, info in model.model_fields.items():
        paths.append((*path, name))
        nested = _nested(info.annotation)
        if nested and isinstance(value.get(name), dict):
            paths += _field_paths(nested[0], value[name], (*path, name))
        elif nested and isinstance(value.get(name), list) and value[name]:
            paths += _field_paths(nested[0], value[name][0], (*path, name, 0))
    return paths


def test_a_struct_for_every_model_with_its_fields_defaults_and_unknown_keys() -> None:
    assert set(STRUCTS) == _models(TrajectoryRecord)
    for model, struct in STRUCTS.items():
        assert struct.__struct_fields__ == tuple(model.model_fields), model
        assert struct.__struct_config__.forbid_unknown_fields == (model.model_config.get("extra") == "forbid")
        fields = {item.name: item for item in msgspec.structs.fields(struct)}
        for name, info in model.model_fields.items():
            field = fields[name]
            assert field.required == info.is_required(), (model, name)
            if info.is_required():
                continue
            if info.default_factory is None:
                assert field.default == info.default and type(field.default) is type(info.default), (
                    model,
                    name,
                )
            else:
                made = info.default_factory()  # type: ignore[call-arg]
                expected = made.model_dump() if isinstance(made, BaseModel) else made
                assert msgspec.to_builtins(field.default_factory()) == expected, (model, name)


def _literals(tp: Any) -> list[Any]:
    if get_origin(tp) is Literal:
        return list(get_args(tp))
    return [value for arg in get_args(tp) for value in _literals(arg)]


def test_every_field_takes_only_what_pydantic_takes_with_equal_values() -> None:
    probes = _PROBES + [
        value
        for model in STRUCTS
        for info in model.model_fields.values()
        for value in _literals(info.annotation)
    ]
    sample = _sample(TrajectoryRecord)
    assert convert_trajectory(sample) is not None
    assert TrajectoryRecord.model_validate(sample)
    paths = _field_paths(TrajectoryRecord, sample)
    assert len(paths) > 60
    accepted_somewhere = set()
    for path in paths:
        for probe in probes:
            raw = with_value_at(sample, path, probe)
            fast = convert_trajectory(raw)
            if fast is None:
                continue
            accepted_somewhere.add(path)
            try:
                exact = TrajectoryRecord.model_validate(raw)
            except ValidationError:
                pytest.fail(f"the fast path accepts {probe!r} at {path}; pydantic does not")
            assert json.dumps(msgspec.to_builtins(fast)) == json.dumps(exact.model_dump()), (path, probe)
    assert accepted_somewhere == set(paths)  # every field accepts some probe: none is unusable


class _Before(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str

    @field_validator("name", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value


class _Aliased(BaseModel):
    name: str = Field(alias="Name")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str


class _Mapping(BaseModel):
    names: dict[str, int]


@pytest.mark.parametrize("model", [_Before, _Aliased, _Frozen, _Mapping])
def test_what_cannot_be_generated_fails_at_import(model: type[BaseModel]) -> None:
    with pytest.raises(TypeError, match="no msgspec form"):
        structs._Generator().struct(model)


@pytest.mark.parametrize(
    ("model", "name"),
    [
        (AgentInvocation, "conversation"),  # validated
        (TrajectoryRecord, "task_id"),  # not free-form
        (TrajectoryModelCall, "token_stats"),
    ],
)
def test_only_free_form_fields_without_validators_may_be_deferred(model: type[BaseModel], name: str) -> None:
    with pytest.raises(TypeError, match="whose decoding may wait"):
        structs.trajectory_decoding([(model, name)])


def test_deferred_fields_are_decoded_when_read() -> None:
    struct, validate = structs.trajectory_decoding([(TrajectoryModelCall, "request")])
    calls = b'[{"request": {"a": [1, 2.5, "\\u00e9"]}, "response": {"b": 2}}, {"request": null}, {}]'
    text = b'{"task_id": "t", "rollout_id": "r", "model_calls": ' + calls + b"}"
    record: Any = msgspec.json.decode(text, type=struct)
    validate(record)
    first, null, absent = record.model_calls
    assert first.request == {"a": [1, 2.5, "\u00e9"]} and first.response == {"b": 2}
    assert bytes(first.request_json) == b'{"a": [1, 2.5, "\\u00e9"]}'  # kept as its text
    assert null.request is None and absent.request is None
    # The key is the model's: the text's attribute is no field of the JSON object.
    with pytest.raises(msgspec.ValidationError, match="request_json"):
        msgspec.json.decode(text.replace(b'"request": null', b'"request_json": 1'), type=struct)
