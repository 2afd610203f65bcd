"""Captured requests: what a broker received (API, version, client id, decoded body, broker), for a
test to assert on, in Python (`running.requests(api="JoinGroup")`) or as JSON over the control
endpoint (minibroker.control.http).

The body is given as plain values: entities become dicts, error codes and enums ints, durations and
timestamps milliseconds, UUIDs strings; bytes up to BYTES_KEPT long stay bytes, longer ones (a
Produce's records) become a `{"bytes": length}` note. A Produce is converted as it is captured (its
records are views of the frame, which the connection reuses for its next request); any other
request when its body is first read (kio's objects are immutable and hold no view of the frame), so
capturing costs a request one small object. The last `control.capture.requests` requests are kept.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import enum
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable

BYTES_KEPT = 4096
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def plain(value: Any) -> Any:
    """A request (or any part of one) as plain Python values (module docstring)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        size = len(value) if not isinstance(value, memoryview) else value.nbytes
        return bytes(value) if size <= BYTES_KEPT else {"bytes": size}
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return round((value - _EPOCH).total_seconds() * 1000)
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    slots = [n for klass in type(value).__mro__ for n in getattr(klass, "__slots__", ()) if not n.startswith("_")]
    if slots:  # minibroker.protocol.produce_request's objects
        return {name: plain(getattr(value, name, None)) for name in slots if name not in ("records_at",)}
    return repr(value)


def jsonable(value: Any) -> Any:
    """`plain` values made JSON-ready: bytes as {"base64": ...}."""
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode()}
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    return value


@dataclass
class CapturedRequest:
    """One request a broker received."""

    api: str  # Kafka's name: "Produce", "JoinGroup"
    api_key: int
    version: int
    client_id: str
    decoded: Any = field(repr=False)  # the request as decoded (kio's object), or already plain values
    broker: int  # the node id that received it
    correlation_id: int
    peer: str  # the client's address:port
    time_ms: int  # the receiving broker's clock (wall milliseconds)
    # Answered instead of handled: "error" (an error stack), "hook", "fault" (fault.injection); None: handled.
    answered_by: str | None = field(default=None, compare=False)

    @property
    def body(self) -> dict[str, Any]:
        """The decoded request as plain values (module docstring), converted when first read."""
        if not isinstance(self.decoded, dict):
            self.decoded = plain(self.decoded)
        return self.decoded

    def to_json(self) -> dict[str, Any]:
        return {
            "api": self.api, "api_key": self.api_key, "version": self.version, "client_id": self.client_id,
            "broker": self.broker, "correlation_id": self.correlation_id, "peer": self.peer,
            "time_ms": self.time_ms, "answered_by": self.answered_by, "body": jsonable(self.body),
        }


class RequestLog:
    """The last `limit` requests captured (0: capture nothing)."""

    def __init__(self, limit: int = 0) -> None:
        self.entries: deque[CapturedRequest] = deque(maxlen=max(limit, 1))
        self.limit = limit

    def set_limit(self, limit: int) -> None:
        if limit != self.limit:
            self.entries = deque(self.entries, maxlen=max(limit, 1))
            self.limit = limit

    def add(self, request: CapturedRequest) -> None:
        self.entries.append(request)

    def clear(self) -> None:
        self.entries.clear()

    def select(self, api: str | int | None = None, *, broker: int | None = None, client_id: str | None = None,
               ) -> list[CapturedRequest]:
        from minibroker.control.apis import api_matches

        found: Iterable[CapturedRequest] = self.entries
        return [r for r in found if (api is None or api_matches(api, r.api, r.api_key))
                and (broker is None or r.broker == broker) and (client_id is None or r.client_id == client_id)]
