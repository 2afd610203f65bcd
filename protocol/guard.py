"""Check every length a request declares against the bytes that are there, before kio reads it.

kio's native readers trust declared lengths: an array count is handed to `Vec::with_capacity` before
a single element is read, so a Metadata v12 whose topic count is the varint `ff ff ff ff 0f` asks
for 34 GB and aborts the whole process (SIGABRT: no Python exception to catch). Kafka's generated
readers check first ("Tried to allocate a collection of size N, but there are only R bytes
remaining"). This module does the same for every request schema kio has: it walks the body as kio
will (same field order, the same encodings, tagged fields after the fields of each flexible struct)
and, before anything is allocated, refuses

- an array whose count times the smallest size one element can have (at least 1 byte, as Kafka
  assumes) exceeds the bytes remaining,
- a string, bytes or records field longer than the bytes remaining, or of a negative length other
  than -1 (null),
- a null where the schema's version does not allow one (Kafka: "non-nullable field X was
  serialized as null"), which kio would otherwise hand to a handler as None,
- a tagged-field count larger than the remaining bytes allow (each takes at least 2),
- a varint longer than 5 bytes.

Once the walk passes, every count kio's reader will see has been bounded by the frame's size (which
framing caps at socket.request.max.bytes), so the native reader allocates at most a few pointers per
byte received.

Tagged fields that the schema does not know are skipped by Kafka (kept as "unknown tagged fields");
kio refuses them with a KeyError. To be as lenient as Kafka the walk notes where they are and the
body is handed to kio with them cut out (a rare path: nothing is copied when there are none).

The walk is compiled once per request class into generated Python code, one function per struct;
consecutive fixed-size fields are merged, and an array of fixed-size elements is checked and skipped
in one step. It costs about 1 us for a typical Produce or Fetch (scripts/bench_request_guard).
Pure: bytes in, a verdict out.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
import typing
from types import NoneType, UnionType
from typing import Callable

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
)
from kio.static.protocol import Entity

from minibroker.protocol.records.varint import read_uvarint, write_uvarint

__all__ = ["RequestRejected", "checker"]

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# Wire sizes of kio's fixed-size kafka_types (uuid is 16 bytes whether null or not).
_FIXED = {
    "int8": 1, "uint8": 1, "bool": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}
_VARIABLE = ("string", "bytes", "records")


class RequestRejected(Exception):
    """The body does not fit its schema; the message says which field and why."""


# One walk's edits: (start, end, replacement) cutting out unknown tagged fields.
_Walk = list


def _uvarint(buf: bytes, pos: int, where: str) -> tuple[int, int]:
    """kio's unsigned varint: at most 5 bytes (35 bits)."""
    return read_uvarint(buf, pos, max_bits=35, what=where, error=RequestRejected)


def _encode_uvarint(value: int) -> bytes:
    out = bytearray()
    write_uvarint(value, out)
    return bytes(out)


# ---- compilation ---------------------------------------------------------------------------
#
# Each struct class becomes one generated Python function, straight-line code over its fields (a
# closure per field cost three times as much). Helpers the generated code calls live in _HELPERS.


def _short(where: str, length: int, remaining: int, what: str = "byte(s)") -> RequestRejected:
    if remaining < 0:
        return RequestRejected(f"truncated before {where}")
    return RequestRejected(f"{where} declares {length} {what} but only {remaining} byte(s) remain")


def _null(where: str) -> RequestRejected:
    return RequestRejected(f"non-nullable field {where} was serialized as null")


def _negative(where: str, length: int) -> RequestRejected:
    return RequestRejected(f"{where} has length {length}")


def _tagged(buf: bytes, pos: int, walk: _Walk, known: dict, where: str) -> int:
    """A tagged-field section with at least one field (the generated code handles the empty one)."""
    count_at = pos
    count, pos = _uvarint(buf, pos, where)
    count_end = pos
    if count * 2 > len(buf) - pos:
        raise _short(where, count, len(buf) - pos, "tagged field(s) of at least 2 bytes")
    kept = count
    for _ in range(count):
        start = pos
        tag, pos = _uvarint(buf, pos, where)
        size, pos = _uvarint(buf, pos, where)
        walk_field = known.get(tag)
        if walk_field is not None:
            pos = walk_field(buf, pos, walk)  # kio (and Kafka) read a known tag by its schema
            continue
        end = pos + size
        if end > len(buf):
            raise _short(f"{where} (tag {tag})", size, len(buf) - pos)
        walk.append((start, end, b""))
        kept -= 1
        pos = end
    if kept != count:
        walk.append((count_at, count_end, _encode_uvarint(kept)))
    return pos


_HELPERS = {
    "_uv": _uvarint,
    "_i8": _I8.unpack_from,
    "_i16": _I16.unpack_from,
    "_i32": _I32.unpack_from,
    "_short": _short,
    "_null": _null,
    "_negative": _negative,
    "_tagged": _tagged,
}


@dataclasses.dataclass(frozen=True)
class _Compiled:
    """A struct's generated walker, its smallest wire size, and its size if always the same."""

    fn: Callable[[bytes, int, _Walk], int]
    min_size: int
    fixed: int | None


class _Emitter:
    """Generates the body of one walker function."""

    def __init__(self, namespace: dict) -> None:
        self.namespace = namespace
        self.lines: list[str] = []
        self.fixed_run = 0
        self.counter = 0

    def const(self, value: object) -> str:
        name = f"_k{len(self.namespace)}"
        self.namespace[name] = value
        return name

    def var(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def emit(self, indent: int, line: str) -> None:
        self.flush(indent)
        self.lines.append("    " * indent + line)

    def skip(self, n: int) -> None:
        self.fixed_run += n

    def flush(self, indent: int) -> None:
        if self.fixed_run:
            run, self.fixed_run = self.fixed_run, 0
            self.lines.append("    " * indent + f"pos += {run}")

    # -- fields --

    def primitive(self, indent: int, kafka_type: str, flexible: bool, nullable: bool, where: str) -> None:
        size = _FIXED.get(kafka_type)
        if size is not None:
            self.skip(size)
            return
        if kafka_type not in _VARIABLE:
            raise TypeError(f"{where}: unknown kafka_type {kafka_type!r}")
        w = self.const(where)
        n = self.var("n")
        if flexible:  # COMPACT_STRING / COMPACT_BYTES / COMPACT_RECORDS: length + 1, 0 for null
            self.emit(indent, f"{n} = buf[pos]")
            self.emit(indent, f"if {n} < 128: pos += 1")
            self.emit(indent, f"else: {n}, pos = _uv(buf, pos, {w})")
            self.emit(indent, f"if {n} == 0:")
            self.emit(indent + 1, "pass" if nullable else f"raise _null({w})")
            self.emit(indent, "else:")
            self.emit(indent + 1, f"pos += {n} - 1")
            self.emit(indent + 1, f"if pos > len(buf): raise _short({w}, {n} - 1, len(buf) - pos + {n} - 1)")
            return
        unpack, width = ("_i16", 2) if kafka_type == "string" else ("_i32", 4)
        self.emit(indent, f"{n} = {unpack}(buf, pos)[0]")
        self.emit(indent, f"pos += {width}")
        self.emit(indent, f"if {n} < 0:")
        if nullable:
            self.emit(indent + 1, f"if {n} != -1: raise _negative({w}, {n})")
        else:
            self.emit(indent + 1, f"raise _null({w}) if {n} == -1 else _negative({w}, {n})")
        self.emit(indent, "else:")
        self.emit(indent + 1, f"pos += {n}")
        self.emit(indent + 1, f"if pos > len(buf): raise _short({w}, {n}, len(buf) - pos + {n})")

    def array(self, indent: int, flexible: bool, nullable: bool, where: str, element_min: int,
              element_fixed: int | None, element) -> None:
        """`element(indent)` emits one element's walk."""
        w = self.const(where)
        c = self.var("c")
        # Kafka's rule (each element takes at least a byte) or better: the element's real minimum.
        min_size = max(1, element_min)
        if flexible:
            self.emit(indent, f"{c} = buf[pos]")
            self.emit(indent, f"if {c} < 128: pos += 1")
            self.emit(indent, f"else: {c}, pos = _uv(buf, pos, {w})")
            self.emit(indent, f"if {c} == 0:")
            self.emit(indent + 1, "pass" if nullable else f"raise _null({w})")
            self.emit(indent, f"elif {c} > 1:")
            self.emit(indent + 1, f"{c} -= 1")
        else:
            self.emit(indent, f"{c} = _i32(buf, pos)[0]")
            self.emit(indent, "pos += 4")
            self.emit(indent, f"if {c} < 0:")
            if nullable:
                self.emit(indent + 1, f"if {c} != -1: raise _negative({w}, {c})")
            else:
                self.emit(indent + 1, f"raise _null({w}) if {c} == -1 else _negative({w}, {c})")
            self.emit(indent, f"elif {c}:")
        body = indent + 1
        self.emit(body, f"if {c} * {min_size} > len(buf) - pos:")
        what = self.const(f"element(s) of at least {min_size} byte(s)")
        self.emit(body + 1, f"raise _short({w}, {c}, len(buf) - pos, {what})")
        if element_fixed is not None:
            self.emit(body, f"pos += {c} * {element_fixed}")
            return
        self.emit(body, f"for _ in range({c}):")
        element(body + 1)
        self.flush(body + 1)


def _is_nullable(tp: object) -> bool:
    return typing.get_origin(tp) in (UnionType, typing.Union) and NoneType in typing.get_args(tp)


def _min_and_fixed(entity: type[Entity], field: dataclasses.Field, where: str) -> tuple[int, int | None]:
    """Smallest wire size of a field and its size when it never varies (None otherwise)."""
    flexible = entity.__flexible__
    kind = classify_field(field)
    if isinstance(kind, PrimitiveField):
        size = _FIXED.get(get_schema_field_type(field))
        if size is not None:
            return size, size
        return (1 if flexible else (2 if get_schema_field_type(field) == "string" else 4)), None
    if isinstance(kind, (PrimitiveTupleField, EntityTupleField)):
        return (1 if flexible else 4), None
    if _is_nullable(field.type):
        return 1, None
    compiled = _compile(kind.type_, where)
    return compiled.min_size, compiled.fixed


def _emit_field(e: _Emitter, indent: int, entity: type[Entity], field: dataclasses.Field, tagged: bool,
                where: str) -> None:
    """One field as kio's native reader reads it (kio rust/src/schema.rs, build_field_schema)."""
    flexible = entity.__flexible__
    kind = classify_field(field)
    nullable = _is_nullable(field.type)
    if isinstance(kind, PrimitiveField):
        # kio reads a tagged primitive as non-nullable whatever its type says.
        e.primitive(indent, get_schema_field_type(field), flexible, nullable and not tagged, where)
    elif isinstance(kind, PrimitiveTupleField):
        kafka_type = get_schema_field_type(field)
        size = _FIXED.get(kafka_type)
        element_min = size if size is not None else (1 if flexible else (2 if kafka_type == "string" else 4))
        e.array(indent, flexible, nullable, where, element_min, size,
                lambda i: e.primitive(i, kafka_type, flexible, False, where + "[]"))
    elif isinstance(kind, EntityField):
        fn = e.const(_compile(kind.type_, where).fn)
        if nullable:  # kio: a marker byte, -1 for null, anything else and the struct follows
            e.emit(indent, "if _i8(buf, pos)[0] == -1: pos += 1")
            e.emit(indent, f"else: pos = {fn}(buf, pos + 1, walk)")
        else:
            e.emit(indent, f"pos = {fn}(buf, pos, walk)")
    elif isinstance(kind, EntityTupleField):
        element = _compile(kind.type_, where + "[]")
        fn = e.const(element.fn)
        e.array(indent, flexible, nullable, where, element.min_size, element.fixed,
                lambda i: e.emit(i, f"pos = {fn}(buf, pos, walk)"))
    else:
        raise TypeError(f"{where}: unsupported field {field!r}")


def _generate(name: str, namespace: dict, emit_body) -> Callable[[bytes, int, _Walk], int]:
    e = _Emitter(namespace)
    emit_body(e)
    e.flush(1)
    source = f"def {name}(buf, pos, walk):\n" + "\n".join(e.lines) + "\n    return pos\n"
    namespace["__source__" + name] = source  # for reading what was generated
    exec(compile(source, f"<guard {name}>", "exec"), namespace)
    return namespace[name]


@functools.cache
def _compile(entity: type[Entity], where: str) -> _Compiled:
    namespace = dict(_HELPERS)
    flexible = entity.__flexible__
    regular = []
    known: dict[int, Callable] = {}
    for field in dataclasses.fields(entity):
        path = f"{where}.{field.name}" if where else field.name
        tag = get_field_tag(field)
        if tag is None:
            regular.append((field, path))
        else:
            known[int(tag)] = _generate(
                f"tag_{field.name}", namespace, lambda e, f=field, p=path: _emit_field(e, 1, entity, f, True, p)
            )

    def body(e: _Emitter) -> None:
        for field, path in regular:
            _emit_field(e, 1, entity, field, False, path)
        if flexible:
            k, w = e.const(known), e.const(f"{where or entity.__name__} tagged fields")
            e.emit(1, "if buf[pos] == 0: pos += 1")
            e.emit(1, f"else: pos = _tagged(buf, pos, walk, {k}, {w})")

    fn = _generate(f"walk_{entity.__name__}", namespace, body)
    sizes = [_min_and_fixed(entity, field, path) for field, path in regular]
    min_size = sum(m for m, _ in sizes) + (1 if flexible else 0)
    fixed = None
    if not flexible and all(f is not None for _, f in sizes):
        fixed = sum(f for _, f in sizes)  # type: ignore[misc]
    return _Compiled(fn, min_size, fixed)


# ---- entry point -------------------------------------------------------------------------------


@functools.cache
def checker(request_cls: type) -> Callable[[bytes, int], bytes | None]:
    """A function (frame, offset) -> None when the body at `offset` is safe for kio's reader as it
    is, or the frame with unknown tagged fields cut out; raises RequestRejected otherwise."""
    root = _compile(request_cls, "").fn
    name = request_cls.__name__

    def check(frame: bytes, offset: int) -> bytes | None:
        walk: _Walk = []
        try:
            end = root(frame, offset, walk)
        except (IndexError, struct.error):
            raise RequestRejected(f"{name} is truncated") from None
        except RequestRejected as exc:
            raise RequestRejected(f"{name}: {exc}") from None
        if end > len(frame):
            raise RequestRejected(f"{name} is truncated: needs {end - len(frame)} more byte(s)")
        if not walk:
            return None
        return _apply(frame, walk)

    return check


def _apply(frame: bytes, edits: list[tuple[int, int, bytes]]) -> bytes:
    pieces = []
    at = 0
    for start, end, replacement in sorted(edits):
        pieces.append(frame[at:start])
        pieces.append(replacement)
        at = end
    pieces.append(frame[at:])
    return b"".join(pieces)
