"""OpenTelemetry's MetricsData (opentelemetry-proto `metrics/v1/metrics.proto`), the payload of a
PushTelemetry request (KIP-714), read with a small protobuf reader: no dependency.

What is read: MetricsData.resource_metrics(1) -> ResourceMetrics{resource(1): Resource{attributes(1)},
scope_metrics(2)} -> ScopeMetrics{metrics(2)} -> Metric{name(1), description(2), unit(3), gauge(5),
sum(7), histogram(9), summary(11)}; Gauge and Sum hold NumberDataPoint(1) (Sum also
aggregation_temporality(2), is_monotonic(3)); NumberDataPoint{attributes(7), start_time_unix_nano(2),
time_unix_nano(3), as_double(4), as_int(6)}; KeyValue{key(1), value(2): AnyValue{string(1), bool(2),
int(3), double(4)}}. Histograms and summaries are kept as their count and sum (fields 4 and 5 of
their data points), as `<name>.count` and `<name>.sum`. Unknown fields are skipped, as protobuf
readers do; a truncated or malformed message raises OtlpError.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

__all__ = ["DataPoint", "Metric", "OtlpError", "parse_metrics_data"]

GAUGE, SUM = "gauge", "sum"
TEMPORALITY_DELTA, TEMPORALITY_CUMULATIVE = 1, 2


class OtlpError(ValueError):
    """The payload is not a MetricsData message."""


@dataclass(frozen=True)
class DataPoint:
    attributes: tuple[tuple[str, str], ...]
    value: float
    time_unix_nano: int = 0


@dataclass
class Metric:
    name: str
    kind: str  # "gauge" or "sum"
    description: str = ""
    unit: str = ""
    monotonic: bool = False
    temporality: int = 0  # for sums: 1 delta, 2 cumulative
    points: list[DataPoint] = field(default_factory=list)


def _varint(data: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise OtlpError("a varint runs past the end")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise OtlpError("a varint is longer than 10 bytes")


def _fields(data: memoryview):
    """(field number, wire type, value) of each field: an int for varints and fixed ints, a
    memoryview for length-delimited fields."""
    pos = 0
    value: int | memoryview
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            if pos + 8 > len(data):
                raise OtlpError("a 64-bit field runs past the end")
            value = int.from_bytes(data[pos:pos + 8], "little")
            pos += 8
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise OtlpError(f"a field of {length} bytes runs past the end")
            value = data[pos:pos + length]
            pos += length
        elif wire == 5:
            if pos + 4 > len(data):
                raise OtlpError("a 32-bit field runs past the end")
            value = int.from_bytes(data[pos:pos + 4], "little")
            pos += 4
        else:
            raise OtlpError(f"wire type {wire} of field {number} is not one protobuf 3 writes")
        yield number, wire, value


def _text(value) -> str:
    if not isinstance(value, memoryview):
        raise OtlpError("a string field is not length-delimited")
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OtlpError(f"a string is not UTF-8: {exc}") from None


def _double(bits: int) -> float:
    return struct.unpack("<d", bits.to_bytes(8, "little"))[0]


def _signed64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _any_value(data: memoryview) -> str:
    for number, wire, value in _fields(data):
        if number == 1 and wire == 2:
            return _text(value)
        if number == 2 and wire == 0:
            return "true" if value else "false"
        if number == 3 and wire == 0:
            return str(_signed64(value))
        if number == 4 and wire == 1:
            return repr(_double(value))
    return ""


def _key_value(data: memoryview) -> tuple[str, str]:
    key, text = "", ""
    for number, wire, value in _fields(data):
        if number == 1 and wire == 2:
            key = _text(value)
        elif number == 2 and wire == 2:
            text = _any_value(value)
    return key, text


def _number_point(data: memoryview) -> DataPoint:
    attributes: list[tuple[str, str]] = []
    number_value = 0.0
    time_nano = 0
    for number, wire, value in _fields(data):
        if number == 7 and wire == 2:
            attributes.append(_key_value(value))
        elif number == 3 and wire == 1:
            time_nano = value
        elif number == 4 and wire == 1:
            number_value = _double(value)
        elif number == 6 and wire == 1:
            number_value = float(_signed64(value))
    return DataPoint(tuple(attributes), number_value, time_nano)


def _count_and_sum(data: memoryview, attributes_field: int) -> tuple[tuple[tuple[str, str], ...], float, float, int]:
    """A HistogramDataPoint's (attributes in field 9) or SummaryDataPoint's (field 7) count and sum."""
    attributes: list[tuple[str, str]] = []
    count = total = 0.0
    time_nano = 0
    for number, wire, value in _fields(data):
        if number == attributes_field and wire == 2:
            attributes.append(_key_value(value))
        elif number == 3 and wire == 1:
            time_nano = value
        elif number == 4 and wire == 1:
            count = float(value)
        elif number == 5 and wire == 1:
            total = _double(value)
    return tuple(attributes), count, total, time_nano


def _metric(data: memoryview) -> list[Metric]:
    name = description = unit = ""
    found: list[Metric] = []
    for number, wire, value in _fields(data):
        if wire != 2:
            continue
        if number == 1:
            name = _text(value)
        elif number == 2:
            description = _text(value)
        elif number == 3:
            unit = _text(value)
        elif number in (5, 7):
            metric = Metric("", GAUGE if number == 5 else SUM)
            for inner, inner_wire, inner_value in _fields(value):
                if inner == 1 and inner_wire == 2:
                    metric.points.append(_number_point(inner_value))
                elif inner == 2 and inner_wire == 0:
                    metric.temporality = inner_value
                elif inner == 3 and inner_wire == 0:
                    metric.monotonic = bool(inner_value)
            found.append(metric)
        elif number in (9, 11):  # histogram, summary: their count and sum
            counts, sums = Metric("", SUM, monotonic=True), Metric("", SUM, monotonic=True)
            for inner, inner_wire, inner_value in _fields(value):
                if inner == 1 and inner_wire == 2:
                    attributes, count, total, time_nano = _count_and_sum(inner_value, 9 if number == 9 else 7)
                    counts.points.append(DataPoint(attributes, count, time_nano))
                    sums.points.append(DataPoint(attributes, total, time_nano))
                elif inner == 2 and inner_wire == 0:
                    counts.temporality = sums.temporality = inner_value
            counts.name, sums.name = ".count", ".sum"
            found += [counts, sums]
    for metric in found:
        metric.name = name + metric.name
        metric.description, metric.unit = description, unit
    return found


def parse_metrics_data(payload: bytes) -> tuple[dict[str, str], list[Metric]]:
    """(the resource attributes, the metrics) of a MetricsData message (OtlpError if it is not one)."""
    resource: dict[str, str] = {}
    metrics: list[Metric] = []
    for number, wire, value in _fields(memoryview(payload)):
        if number != 1 or wire != 2:
            continue
        for inner, inner_wire, inner_value in _fields(value):
            if inner == 1 and inner_wire == 2:  # Resource
                for attr_number, attr_wire, attr in _fields(inner_value):
                    if attr_number == 1 and attr_wire == 2:
                        key, text = _key_value(attr)
                        resource[key] = text
            elif inner == 2 and inner_wire == 2:  # ScopeMetrics
                for scope_number, scope_wire, scope_value in _fields(inner_value):
                    if scope_number == 2 and scope_wire == 2:
                        metrics += _metric(scope_value)
    return resource, metrics
