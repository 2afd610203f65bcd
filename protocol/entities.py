"""Build kio response objects from plain values, whatever the version.

Each API version is its own set of kio dataclasses, with fields coming and going between versions.
Handlers describe a response once, as nested dicts and lists over the union of all versions' fields,
and `build(ResponseClass, data)` keeps the fields that version has, fills the ones it leaves out from
the schema's defaults, and converts plain values to kio's types (error codes, millisecond durations
and timestamps). The plan for each class is computed once.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import typing
from types import NoneType, UnionType
from typing import Any

from kio.schema.errors import ErrorCode

_UTC = datetime.timezone.utc
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=_UTC)

# Field kinds
_PLAIN, _ERROR, _DURATION, _TIMESTAMP, _ENTITY, _ENTITIES = range(6)


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (UnionType, typing.Union):
        args = [a for a in typing.get_args(tp) if a is not NoneType]
        if len(args) == 1:
            return args[0], True
    return tp, False


@functools.cache
def _plan(cls: type) -> tuple[tuple[str, int, Any, bool, Any], ...]:
    hints = typing.get_type_hints(cls)
    plan = []
    for field in dataclasses.fields(cls):
        kafka_type = field.metadata.get("kafka_type")
        tp, optional = _unwrap_optional(hints[field.name])
        sub = None
        if kafka_type == "error_code":
            kind = _ERROR
        elif kafka_type in ("timedelta_i32", "timedelta_i64"):
            kind = _DURATION
        elif kafka_type == "datetime_i64":
            kind = _TIMESTAMP
        elif typing.get_origin(tp) is tuple and dataclasses.is_dataclass(typing.get_args(tp)[0]):
            kind, sub = _ENTITIES, typing.get_args(tp)[0]
        elif dataclasses.is_dataclass(tp):
            kind, sub = _ENTITY, tp
        else:
            kind = _PLAIN
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            default = dataclasses.MISSING
        plan.append((field.name, kind, sub, optional, default))
    return tuple(plan)


def timestamp(ms: int) -> datetime.datetime:
    return _EPOCH + datetime.timedelta(milliseconds=ms)


def duration(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


def to_ms(value: datetime.timedelta | datetime.datetime | None, default: int = -1) -> int:
    """Milliseconds from a kio duration or timestamp (request fields)."""
    if value is None:
        return default
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return round((value - _EPOCH).total_seconds() * 1000)


def build(cls: type, data: dict[str, Any]) -> Any:
    """Make an instance of kio class `cls` from `data` (see the module docstring)."""
    kwargs = {}
    for name, kind, sub, optional, default in _plan(cls):
        if name not in data:
            if default is dataclasses.MISSING:
                raise KeyError(f"{cls.__module__}.{cls.__qualname__} needs field {name!r}")
            continue
        value = data[name]
        if value is None:
            pass
        elif kind == _ERROR:
            value = ErrorCode(value)
        elif kind == _DURATION:
            value = duration(value) if isinstance(value, int) else value
        elif kind == _TIMESTAMP:
            if isinstance(value, int):
                value = None if optional and value < 0 else timestamp(value)
        elif kind == _ENTITIES:
            value = tuple(item if isinstance(item, sub) else build(sub, item) for item in value)
        elif kind == _ENTITY:
            value = value if isinstance(value, sub) else build(sub, value)
        kwargs[name] = value
    return cls(**kwargs)

