"""A fast, exact stand-in for validating ``ng_trajectory``: msgspec Structs generated from the
pydantic models of :mod:`gymflow.evidence.trajectory` at import time.

The models stay the one contract. Each model becomes a Struct with the same fields, in the same
order, with the same types, constraints and defaults (unknown keys forbidden except where the
model ignores them); the model's own validator functions then run on the Struct. msgspec's strict
conversion accepts a subset of what pydantic's lax mode accepts, with equal values (an ``int``
where a ``float`` is declared becomes that float in both), so :func:`convert_trajectory` either
returns a record equal to pydantic's or ``None``, and the caller then takes the exact path for that
record. A field, constraint or validator the generator does not understand fails at import.

The Structs have the models' attribute names and types, so consumers that only read attributes
(the health checks) accept either; :func:`convert_trajectory` is typed as returning the model for
that reason and must never be given to code that calls pydantic methods.
"""

from __future__ import annotations

import inspect
import operator
import types
import typing
from collections.abc import Callable, Collection
from typing import Annotated, Any, Literal, Union, cast, get_args, get_origin

import msgspec
import orjson
from pydantic import BaseModel
from pydantic.fields import FieldInfo

# read_trajectory applies trajectory.py's depth rule exactly as it does.
from gymflow.evidence.trajectory import TrajectoryRecord, conversation_too_deep, validate_trajectory

__all__ = [
    "STRUCTS",
    "convert_trajectory",
    "read_trajectory",
    "struct_converters",
    "trajectory_decoding",
]

_BOUNDS = ("ge", "gt", "le", "lt")
"""The ``annotated_types`` bounds pydantic keeps in field metadata (``Ge(ge=0)``, ...)."""
_SCALARS = (str, int, float, bool, type(None))


def _bounds(metadata: list[Any]) -> dict[str, Any]:
    bounds: dict[str, Any] = {}
    for item in metadata:
        if isinstance(item, FieldInfo):  # ``Annotated[float, Field(ge=0)]`` nested in a union
            bounds.update(_bounds(item.metadata))
            continue
        name = type(item).__name__.lower()
        if name not in _BOUNDS or not hasattr(item, name):
            raise TypeError(f"no msgspec form for the constraint {item!r}")
        bounds[name] = getattr(item, name)
    return bounds


def _meta(metadata: list[Any]) -> msgspec.Meta | None:
    bounds = _bounds(metadata)
    return msgspec.Meta(**bounds) if bounds else None


DEFERRED_SUFFIX = "_json"
"""A deferred field's JSON text is kept under its name plus this suffix."""


def _decoded(text_field: str) -> property:
    """The attribute of a deferred field: the value of the JSON text the Struct keeps in
    ``text_field`` (``None`` when the key is absent), decoded by msgspec on every read."""
    get_text = operator.attrgetter(text_field)
    decode = msgspec.json.decode

    def value(struct: Any) -> Any:
        text = get_text(struct)
        return None if text is None else decode(text)

    return property(value)


class _Generator:
    """Translates models (and the models they nest) into Structs, each once. The free-form
    (``Any``) fields named in ``deferred`` are not decoded with the rest: their Struct keeps the
    JSON text (``msgspec.Raw``) and decodes it when the attribute is read."""

    def __init__(self, deferred: Collection[tuple[type[BaseModel], str]] = ()) -> None:
        self.structs: dict[type[BaseModel], type[msgspec.Struct]] = {}
        self.validators: dict[type[BaseModel], Callable[[Any], None] | None] = {}
        self.deferred = frozenset(deferred)

    def annotation(self, tp: Any) -> Any:
        origin = get_origin(tp)
        if tp is Any or tp in _SCALARS:
            return tp
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            return self.struct(tp)
        if origin is Annotated:
            inner, *metadata = get_args(tp)
            meta = _meta(list(metadata))
            translated = self.annotation(inner)
            return translated if meta is None else Annotated[translated, meta]
        if origin in (Union, types.UnionType):
            return Union[tuple(self.annotation(arg) for arg in get_args(tp))]  # noqa: UP007
        if origin is list:
            (item,) = get_args(tp)
            return list[self.annotation(item)]  # type: ignore[misc]
        if origin is Literal and all(isinstance(arg, str) for arg in get_args(tp)):
            return tp
        raise TypeError(f"no msgspec form for the annotation {tp!r}")

    def field(self, info: FieldInfo) -> tuple[Any, Any]:
        tp = self.annotation(info.annotation)
        meta = _meta(info.metadata)
        if meta is not None:
            tp = Annotated[tp, meta]
        if info.default_factory is not None:
            factory = info.default_factory
            if isinstance(factory, type) and issubclass(factory, BaseModel):
                factory = self.struct(factory)
            return tp, msgspec.field(default_factory=cast(Callable[[], Any], factory))
        if info.is_required():
            return tp, msgspec.NODEFAULT
        if not isinstance(info.default, _SCALARS):
            raise TypeError(f"no msgspec form for the default {info.default!r}")
        return tp, info.default

    @staticmethod
    def _deferred_text(model: type[BaseModel], name: str, info: FieldInfo) -> tuple[Any, ...]:
        """The Struct field keeping the JSON text of the deferred field ``name``."""
        validated = any(
            name in item.info.fields for item in model.__pydantic_decorators__.field_validators.values()
        )
        if info.annotation is not Any or info.default is not None or info.metadata or validated:
            raise TypeError(f"{model.__name__}.{name} is not a free-form field whose decoding may wait")
        text_field = name + DEFERRED_SUFFIX
        if text_field in model.model_fields:
            raise TypeError(f"{model.__name__}.{text_field} would hide the text of {name}")
        return (text_field, msgspec.Raw, msgspec.field(name=name, default=None))

    def struct(self, model: type[BaseModel]) -> type[msgspec.Struct]:
        if model in self.structs:
            return self.structs[model]
        config = dict(model.model_config)
        extra = config.pop("extra", "ignore")
        if config or extra not in ("forbid", "ignore"):
            raise TypeError(f"no msgspec form for {model.__name__}'s config {model.model_config!r}")
        fields: list[tuple[Any, ...]] = []
        attributes: dict[str, Any] = {}
        for name, info in model.model_fields.items():
            if info.alias is not None or info.validation_alias is not None:
                raise TypeError(f"no msgspec form for the alias of {model.__name__}.{name}")
            if (model, name) in self.deferred:
                text = self._deferred_text(model, name, info)
                fields.append(text)
                attributes[name] = _decoded(text[0])
                continue
            tp, default = self.field(info)
            fields.append((name, tp) if default is msgspec.NODEFAULT else (name, tp, default))
        struct = msgspec.defstruct(
            f"{model.__name__}Struct",
            fields,
            kw_only=True,
            forbid_unknown_fields=extra == "forbid",
            gc=False,
            module=__name__,
            namespace=attributes,
        )
        self.structs[model] = struct
        self.validators[model] = _validators(model)
        return struct


def _validators(model: type[BaseModel]) -> Callable[[Any], None] | None:
    """The model's "after" field and model validators as one step over a converted Struct."""
    decorators = model.__pydantic_decorators__
    if decorators.root_validators or decorators.validators or decorators.field_serializers:
        raise TypeError(f"no msgspec form for the validators of {model.__name__}")
    field_steps: list[tuple[str, Callable[[Any], Any]]] = []
    for decorator in decorators.field_validators.values():
        if decorator.info.mode != "after" or len(inspect.signature(decorator.func).parameters) != 1:
            raise TypeError(f"no msgspec form for the validator {model.__name__}.{decorator.cls_var_name}")
        field_steps += [(name, decorator.func) for name in decorator.info.fields]
    model_steps: list[Callable[[Any], Any]] = []
    for validator in decorators.model_validators.values():
        if validator.info.mode != "after":
            raise TypeError(f"no msgspec form for the validator {model.__name__}.{validator.cls_var_name}")
        model_steps.append(validator.func)
    if not field_steps and not model_steps:
        return None

    if not field_steps and len(model_steps) == 1:
        (only,) = model_steps

        def validate_one(struct: Any) -> None:
            if only(struct) is not struct:
                raise ValueError("a model validator replaced the record")

        return validate_one

    def validate(struct: Any) -> None:
        for name, step in field_steps:
            setattr(struct, name, step(getattr(struct, name)))
        for step in model_steps:
            if step(struct) is not struct:
                raise ValueError("a model validator replaced the record")

    return validate


_Step = Callable[[Any], None]


def _walker(generator: _Generator, model: type[BaseModel]) -> _Step | None:
    """One step validating a Struct of ``model`` bottom-up, as pydantic does (nested records
    first), visiting only the fields that lead to a validator; ``None`` when nothing does."""
    children: list[tuple[str, bool, _Step]] = []
    for name, info in model.model_fields.items():
        nested = _nested_model(info.annotation)
        if nested is not None:
            step = _walker(generator, nested[0])
            if step is not None:
                children.append((name, nested[1], step))
    own = generator.validators[model]
    if not children:
        return own  # a leaf: its own validators, or nothing to do

    def walk(struct: Any) -> None:
        for name, many, step in children:
            value = getattr(struct, name)
            if many:
                for item in value:
                    step(item)
            elif value is not None:
                step(value)
        if own is not None:
            own(struct)

    return walk


def _nested_model(tp: Any) -> tuple[type[BaseModel], bool] | None:
    """The model a field holds (and whether in a list), for ``M``, ``M | None`` and ``list[M]``."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp, False
    args = get_args(tp)
    if get_origin(tp) is list and isinstance(args[0], type) and issubclass(args[0], BaseModel):
        return args[0], True
    if get_origin(tp) in (Union, types.UnionType):
        models = [found for arg in args if (found := _nested_model(arg)) is not None]
        return models[0] if len(models) == 1 and not models[0][1] else None
    return None


_generator = _Generator()
_TRAJECTORY = _generator.struct(TrajectoryRecord)
_VALIDATE = _walker(_generator, TrajectoryRecord) or (lambda _: None)
STRUCTS: typing.Mapping[type[BaseModel], type[msgspec.Struct]] = types.MappingProxyType(_generator.structs)
"""The Struct generated for each model, the nested ones included."""


def struct_converters(models: typing.Sequence[type[BaseModel]]) -> list[Callable[[Any], Any]]:
    """For each of ``models``, a function converting a raw value to that model's Struct (made by
    a generator of their own, so :data:`STRUCTS` stays the trajectory's) and running the model's
    validators on it: equal values to pydantic's, or an exception where the caller must take the
    exact path (any exception: the fast path never decides an error)."""
    generator = _Generator()
    converters: list[Callable[[Any], Any]] = []
    for model in models:
        struct = generator.struct(model)
        validate = _walker(generator, model) or (lambda _: None)

        def convert(raw: Any, struct: type[msgspec.Struct] = struct, validate: _Step = validate) -> Any:
            record = msgspec.convert(raw, struct)
            validate(record)
            return record

        converters.append(convert)
    return converters


def trajectory_decoding(
    deferred: Collection[tuple[type[BaseModel], str]],
) -> tuple[type[msgspec.Struct], Callable[[Any], None]]:
    """A Struct of the trajectory for msgspec to decode from JSON text, and the step running the
    models' validators on a decoded one (any exception: the caller takes the exact path).

    Decoding text instead of converting ``orjson.loads``'s value is equal only for text on which
    msgspec and orjson agree (``gymflow._json_agreement``), and the depth rule is the caller's.
    The free-form fields in ``deferred`` are decoded only when read (free-form values have no
    validation to run, so nothing is skipped): a reader that looks at one on few records saves
    building the rest, which in a trajectory are most of its objects.
    """
    generator = _Generator(deferred)
    struct = generator.struct(TrajectoryRecord)
    return struct, _walker(generator, TrajectoryRecord) or (lambda _: None)


def convert_trajectory(raw: Any) -> TrajectoryRecord | None:
    """``raw`` as pydantic would validate it (equal values), or ``None``: the fast path declined
    (pydantic may still accept it, with coercions, or reject it) and the caller must take the
    exact path. Never raises."""
    try:
        record = msgspec.convert(raw, _TRAJECTORY)
        _VALIDATE(record)
    except Exception:  # noqa: BLE001 - any doubt goes to the exact path
        return None
    return cast(TrajectoryRecord, record)


def read_trajectory(raw: Any) -> TrajectoryRecord:
    """``validate_trajectory(raw)``'s result or error, through the fast path when it accepts
    ``raw`` and through the exact one otherwise.

    The depth rule is decided by ``trajectory.py`` too: a record the fast path accepts is passed
    to the exact path when a free-form value might nest too deeply. That is known cheaply when
    orjson can serialise the whole raw value (at most 255 levels, so every free-form value, two
    levels or more down, is shallower than the rule's limit); conversations, which validation
    rewrites, are walked as the exact path walks them.
    """
    record = convert_trajectory(raw)
    if record is None:
        return validate_trajectory(raw)
    try:
        orjson.dumps(raw)
    except TypeError:
        return validate_trajectory(raw)
    if conversation_too_deep(record):
        return validate_trajectory(raw)
    return record
