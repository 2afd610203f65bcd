"""Hostile request bytes for every API the broker serves, at every version it advertises.

Generated from the handler registry (minibroker.handlers.load_all), so a new handler, or a new
version of one, is fuzzed without touching the tests. Three kinds of body:

- valid: a random instance of the version's kio request class (Hypothesis `from_type`), encoded;
- mutated: a valid body with one length field (string, bytes, records, array count, tagged-field
  count or size) set to an extreme (the largest value its encoding holds, -1, -2, i32 min, 0) or
  widened to a 5-byte varint, truncated, or with bytes overwritten;
- random: bytes with no structure at all.

`length_fields` finds the length prefixes of a valid body with its own walk over kio's field
descriptions (independent of protocol/guard.py, which it is used to test).

The suite runs a few examples per (api, version), a few seconds in all; the `fuzz-long` profile
(`MINIBROKER_FUZZ_PROFILE=fuzz-long scripts/test tests/broker/test_fuzz.py tests/protocol/test_guard.py`)
runs 2,000 per (api, version), for a soak.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import os
import struct
import typing
import uuid
from types import NoneType, UnionType

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from kio.serial import entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
)
from kio.schema.errors import ErrorCode
from kio.static.primitive import Records

from minibroker.handlers import load_all
from minibroker.protocol.entities import timestamp
from minibroker.protocol.messages import api_schema
from minibroker.protocol.records import read_uvarint
from tests.support.batches import make_batch

settings.register_profile(
    "fuzz-long", max_examples=2000, deadline=None, suppress_health_check=list(HealthCheck),
)
LONG = os.environ.get("MINIBROKER_FUZZ_PROFILE") == "fuzz-long"


def fuzz_settings(examples_in_ci: int) -> settings:
    """`examples_in_ci` examples per test in the suite; the fuzz-long profile when asked for."""
    if LONG:
        return settings.get_profile("fuzz-long")
    return settings(max_examples=examples_in_ci, deadline=None, suppress_health_check=list(HealthCheck),
                    database=None)


# Records are opaque bytes to the request schema; the broker checks them itself. Half are valid
# batches, so that the fuzz reaches past the batch checks too.
st.register_type_strategy(Records, st.one_of(
    st.binary(max_size=200),
    st.lists(st.tuples(st.none() | st.binary(max_size=10), st.binary(max_size=30)), min_size=1, max_size=3)
    .map(make_batch),
).map(Records))

_FIXED = {
    "int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4,
    "uint32": 4, "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8,
    "datetime_i64": 8, "uuid": 16,
}


def served() -> list[tuple[int, int, str]]:
    """(api_key, version, name) for every version of every API the broker advertises."""
    return [
        (h.api_key, v, h.name)
        for h in sorted(load_all().values(), key=lambda h: h.api_key)
        for v in range(h.min_version, h.max_version + 1)
    ]


def served_ids() -> list[str]:
    return [f"{name}-v{v}" for _, v, name in served()]


def request_class(api_key: int, version: int) -> type:
    return api_schema(api_key, version).request


def encode_body(request) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(request))(buffer, request)
    return buffer.getvalue()


def valid_bodies(api_key: int, version: int) -> st.SearchStrategy[bytes]:
    return requests(request_class(api_key, version)).map(encode_body)


# The live fuzz creates topic "fuzz"; the rest are a group, a SASL user and mechanisms.
KNOWN_NAMES = ("fuzz", "fuzz-group", "alice", "PLAIN", "SCRAM-SHA-256", "")

_INTS = {
    "int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1), "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1), "uint8": (0, 2**8 - 1), "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1), "uint64": (0, 2**64 - 1),
}


def _primitive_values(kafka_type: str, nullable: bool) -> st.SearchStrategy:
    if kafka_type in _INTS:
        low, high = _INTS[kafka_type]
        values = st.integers(low, high)
    elif kafka_type == "bool":
        values = st.booleans()
    elif kafka_type == "float64":
        values = st.floats(allow_nan=False, allow_infinity=False)
    elif kafka_type == "string":
        # Names that exist often enough to get past "unknown topic/group" into the handlers' depths.
        values = st.sampled_from(KNOWN_NAMES) | st.text(max_size=12)
    elif kafka_type == "bytes":
        values = st.binary(max_size=16)
    elif kafka_type == "records":
        values = st.from_type(Records)
    elif kafka_type == "uuid":
        values = st.uuids()
    elif kafka_type == "error_code":
        values = st.sampled_from(ErrorCode)
    elif kafka_type == "timedelta_i32":
        values = st.integers(-(2**31), 2**31 - 1).map(lambda ms: datetime.timedelta(milliseconds=ms))
    elif kafka_type == "timedelta_i64":
        values = st.integers(-(2**40), 2**40).map(lambda ms: datetime.timedelta(milliseconds=ms))
    elif kafka_type == "datetime_i64":
        values = st.integers(0, 2**41).map(timestamp)
    else:
        raise TypeError(kafka_type)
    return st.none() | values if nullable else values


@functools.cache
def requests(cls: type) -> st.SearchStrategy:
    """Instances of a kio request (or nested) class with small arrays and strings: quick to make,
    and small enough that Hypothesis explores many of them in a few seconds."""
    fields = {}
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        nullable = _nullable(f.type)
        if isinstance(kind, PrimitiveField):
            values = _primitive_values(get_schema_field_type(f), nullable)
        elif isinstance(kind, PrimitiveTupleField):
            values = st.lists(_primitive_values(get_schema_field_type(f), False), max_size=3).map(tuple)
            values = st.none() | values if nullable else values
        elif isinstance(kind, EntityField):
            values = st.none() | requests(kind.type_) if nullable else requests(kind.type_)
        else:
            values = st.lists(requests(kind.type_), max_size=3).map(tuple)
            values = st.none() | values if nullable else values
        fields[f.name] = values
    return st.builds(cls, **fields)


def header(api_key: int, version: int, correlation_id: int, client_id: str | None = "fuzz") -> bytes:
    """Request header v1, or v2 (one empty tagged-field section more) for a flexible version."""
    out = struct.pack(">hhi", api_key, version, correlation_id)
    if client_id is None:
        out += struct.pack(">h", -1)
    else:
        raw = client_id.encode()
        out += struct.pack(">h", len(raw)) + raw
    if api_schema(api_key, version).flexible:
        out += b"\0"
    return out


def frame(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    payload = header(api_key, version, correlation_id) + body
    return struct.pack(">i", len(payload)) + payload


# ---- where the length prefixes are --------------------------------------------------------------


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    return read_uvarint(buf, pos, max_bits=35)


def _nullable(tp) -> bool:
    return typing.get_origin(tp) in (UnionType, typing.Union) and NoneType in typing.get_args(tp)


def length_fields(cls: type, body: bytes) -> list[tuple[int, str]]:
    """(position, encoding) of every length prefix in a valid `body` of `cls`, encoding one of
    'i16', 'i32', 'uvarint'. A plain reading of kio's wire format, for mutation."""
    found: list[tuple[int, str]] = []

    def primitive(kafka_type: str, flexible: bool, pos: int) -> int:
        if kafka_type in _FIXED:
            return pos + _FIXED[kafka_type]
        if flexible:
            found.append((pos, "uvarint"))
            length, pos = _uvarint(body, pos)
            return pos + max(0, length - 1)
        if kafka_type == "string":
            found.append((pos, "i16"))
            (length,) = struct.unpack_from(">h", body, pos)
            return pos + 2 + max(0, length)
        found.append((pos, "i32"))
        (length,) = struct.unpack_from(">i", body, pos)
        return pos + 4 + max(0, length)

    def array(flexible: bool, pos: int, element) -> int:
        if flexible:
            found.append((pos, "uvarint"))
            count, pos = _uvarint(body, pos)
            count -= 1
        else:
            found.append((pos, "i32"))
            (count,) = struct.unpack_from(">i", body, pos)
            pos += 4
        for _ in range(max(0, count)):
            pos = element(pos)
        return pos

    def field(entity: type, f: dataclasses.Field, tagged: bool, pos: int) -> int:
        flexible = entity.__flexible__
        kind = classify_field(f)
        if isinstance(kind, PrimitiveField):
            return primitive(get_schema_field_type(f), flexible, pos)
        if isinstance(kind, PrimitiveTupleField):
            return array(flexible, pos, lambda p: primitive(get_schema_field_type(f), flexible, p))
        if isinstance(kind, EntityField):
            if _nullable(f.type):
                if struct.unpack_from(">b", body, pos)[0] == -1:
                    return pos + 1
                pos += 1
            return struct_(kind.type_, pos)
        if isinstance(kind, EntityTupleField):
            return array(flexible, pos, lambda p: struct_(kind.type_, p))
        raise TypeError(f)

    def struct_(entity: type, pos: int) -> int:
        tagged = {}
        for f in dataclasses.fields(entity):
            tag = get_field_tag(f)
            if tag is None:
                pos = field(entity, f, False, pos)
            else:
                tagged[int(tag)] = f
        if entity.__flexible__:
            found.append((pos, "uvarint"))
            count, pos = _uvarint(body, pos)
            for _ in range(count):
                tag, pos = _uvarint(body, pos)
                found.append((pos, "uvarint"))
                size, pos = _uvarint(body, pos)
                if tag in tagged:
                    pos = field(entity, tagged[tag], True, pos)
                else:
                    pos += size
        return pos

    struct_(cls, 0)
    return found


_EXTREMES = {
    "i16": [0x7FFF, -1, -2, -0x8000, 0],
    "i32": [0x7FFFFFFF, -1, -2, -0x80000000, 0, 0x10000],
}
_UVARINT_EXTREMES = [
    b"\xff\xff\xff\xff\x0f",  # 2**35 - 1, the largest kio reads
    b"\xff\xff\xff\xff\x07",  # 2**34 - 1
    b"\x80\x80\x80\x80\x10",  # 2**32: one past u32
    b"\xff\xff\xff\xff\xff",  # a 5th byte with its continuation bit: too long
    b"\x00",  # null / empty-minus-one
    b"\x80\x01",  # 128 in two bytes
]


def set_length(body: bytes, pos: int, encoding: str, choice: int) -> bytes:
    """`body` with the length prefix at `pos` replaced by one of its extremes."""
    if encoding == "uvarint":
        _, end = _uvarint(body, pos)
        replacement = _UVARINT_EXTREMES[choice % len(_UVARINT_EXTREMES)]
        return body[:pos] + replacement + body[end:]
    values = _EXTREMES[encoding]
    fmt = ">h" if encoding == "i16" else ">i"
    size = struct.calcsize(fmt)
    return body[:pos] + struct.pack(fmt, values[choice % len(values)]) + body[pos + size:]


@st.composite
def hostile_bodies(draw, api_key: int, version: int) -> bytes:
    """A body for (api_key, version): valid, one of the mutations above, or random bytes."""
    kind = draw(st.sampled_from(["length", "length", "truncate", "overwrite", "random", "valid"]))
    if kind == "random":
        return draw(st.binary(max_size=300))
    body = draw(valid_bodies(api_key, version))
    if kind == "valid":
        return body
    if kind == "truncate":
        return body[: draw(st.integers(0, max(0, len(body) - 1)))]
    if kind == "overwrite" or not body:
        if not body:
            return draw(st.binary(max_size=50))
        at = draw(st.integers(0, len(body) - 1))
        junk = draw(st.sampled_from([b"\xff\xff\xff\xff\x0f", b"\x7f\xff\xff\xff", b"\xff\xff",
                                     b"\x80\x00\x00\x00", b"\xfe"]) | st.binary(min_size=1, max_size=8))
        return body[:at] + junk + body[at + len(junk):]
    fields = length_fields(request_class(api_key, version), body)
    pos, encoding = draw(st.sampled_from(fields))
    return set_length(body, pos, encoding, draw(st.integers(0, 5)))


# ---- one instance per nullable field, that field null ---------------------------------------------

_ONE = {
    "bool": True, "float64": 1.0, "string": "fuzz", "bytes": b"", "uuid": uuid.UUID(int=1),
    "error_code": ErrorCode.none, "timedelta_i32": datetime.timedelta(milliseconds=1),
    "timedelta_i64": datetime.timedelta(milliseconds=1),
}


def _one(kafka_type: str):
    if kafka_type in _INTS:
        return 1
    if kafka_type == "records":
        return Records(make_batch([(None, b"fuzz")]))
    if kafka_type == "datetime_i64":
        return timestamp(1)
    return _ONE[kafka_type]


def with_null(cls: type, path: tuple[str, ...] = ()):
    """An instance of `cls` with every array of one element and every value 1, "fuzz", ...; the
    field at `path` (names from the root, through one-element arrays) is None."""
    values = {}
    for f in dataclasses.fields(cls):
        if path and f.name == path[0] and len(path) == 1:
            values[f.name] = None
            continue
        rest = path[1:] if path and f.name == path[0] else ()
        kind = classify_field(f)
        if isinstance(kind, PrimitiveField):
            values[f.name] = _one(get_schema_field_type(f))
        elif isinstance(kind, PrimitiveTupleField):
            values[f.name] = (_one(get_schema_field_type(f)),)
        elif isinstance(kind, EntityField):
            values[f.name] = with_null(kind.type_, rest)
        else:
            values[f.name] = (with_null(kind.type_, rest),)
    return cls(**values)


def nullable_paths(cls: type, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every field of `cls` and its nested structs that the schema lets be null."""
    paths = []
    for f in dataclasses.fields(cls):
        here = prefix + (f.name,)
        if _nullable(f.type):
            paths.append(here)
        kind = classify_field(f)
        if isinstance(kind, (EntityField, EntityTupleField)):
            paths.extend(nullable_paths(kind.type_, here))
    return paths
