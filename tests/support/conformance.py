"""The conformance corpus's engine: run each scenario against Apache Kafka and against minibroker,
normalise what the two answered, compare, and sort each difference into deliberate (listed, with
its reason, in tests/conformance/differences.toml, which docs/differences.md is generated from) or
undocumented.

A scenario is a small function of a `Run` registered with `@scenario(name, apis=...)`: it sends
requests (`run.call(api_key, version, body)`, bodies as plain dicts, fields left out filled with
zero values) and records what it saw (each response is recorded as it comes; `run.note` records
anything else, a real client's results say). The function runs once against each broker; the two
recordings are normalised (`normalise`) and compared field by field (`compare`).

What legitimately differs between two brokers is normalised away and nothing else:
- ids the brokers pick: topic ids and other UUIDs, producer ids, member ids, fetch session ids
  become `uuid#1`, `pid#1`, `member#1`, ... in the order they first appear in the recording;
- where the brokers are: hosts, ports, cluster ids;
- wall-clock times (any integer within ten minutes of the run, in milliseconds since the epoch);
- error messages: their presence is compared, not their text;
- throttle times: equal within THROTTLE_TOLERANCE (see `compare`).
Lists of named things (topics, partitions, configs, groups, ...) are compared in name order.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import enum
import fnmatch
import json
import functools
import socket
import struct
import time
import tomllib
import traceback
import typing
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import NoneType, UnionType
from typing import Any, Callable, Iterator

from kio.index import load_request_schema
from kio.serial.errors import OutOfBoundValue

from minibroker.protocol.messages import api_name, decode_response, encode_request

ROOT = Path(__file__).resolve().parents[2]
DIFFERENCES = ROOT / "tests" / "conformance" / "differences.toml"
DIFFERENCES_DOC = ROOT / "docs" / "differences.md"
# The page's hand-written part, after the generated list: differences the corpus does not look at.
DIFFERENCES_BY_AREA = ROOT / "docs" / "parts" / "differences-by-area.md"

# Throttle times are equal when both are 0, or both are positive and within 50% or 500 ms of each
# other: the two brokers measure rates over windows that start at different instants.
THROTTLE_TOLERANCE = (0.5, 500)
WALL_CLOCK_WINDOW_MS = 10 * 60 * 1000

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


# ---- requests from plain dicts -------------------------------------------------------------------

def _unwrap(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (UnionType, typing.Union):
        args = [a for a in typing.get_args(tp) if a is not NoneType]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _zero(kafka_type: str | None, tp: Any, optional: bool) -> Any:
    if optional:
        return None
    if typing.get_origin(tp) is tuple:
        return ()
    if dataclasses.is_dataclass(tp):
        return make(tp, {})
    if kafka_type in ("string",):
        return ""
    if kafka_type in ("bytes", "records"):
        return b""
    if kafka_type == "bool":
        return False
    if kafka_type == "uuid":
        return uuid.UUID(int=0)
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if kafka_type == "datetime_i64":
        return _EPOCH
    if kafka_type == "float64":
        return 0.0
    return 0


def _convert(kafka_type: str | None, tp: Any, value: Any) -> Any:
    if value is None:
        return None
    if typing.get_origin(tp) is tuple:
        (item,) = [a for a in typing.get_args(tp) if a is not Ellipsis]
        item, _ = _unwrap(item)
        if dataclasses.is_dataclass(item):
            return tuple(v if isinstance(v, item) else make(item, v) for v in value)
        return tuple(value)
    if dataclasses.is_dataclass(tp):
        return value if isinstance(value, tp) else make(tp, value)
    if kafka_type in ("timedelta_i32", "timedelta_i64") and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    if kafka_type == "datetime_i64" and isinstance(value, int):
        return _EPOCH + datetime.timedelta(milliseconds=value)
    if kafka_type == "uuid" and isinstance(value, str):
        return uuid.UUID(value)
    if kafka_type == "uuid" and isinstance(value, int):
        return uuid.UUID(int=value)
    return value


@functools.cache
def _fields_of_any_version(api_key: int) -> frozenset[str]:
    """Every field name of any version of an API's request (nested ones too)."""
    from minibroker.protocol.messages import kio_versions

    names: set[str] = set()
    low, high = kio_versions(api_key) or (0, -1)

    def collect(cls: type) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            names.add(f.name)
            tp, _ = _unwrap(hints[f.name])
            if typing.get_origin(tp) is tuple:
                tp, _ = _unwrap(typing.get_args(tp)[0])
            if dataclasses.is_dataclass(tp):
                collect(tp)

    for version in range(low, high + 1):
        collect(load_request_schema(api_key, version))
    return frozenset(names)


def make(cls: type, body: dict[str, Any]) -> Any:
    """An instance of kio class `cls` from `body`: nested dicts and lists, millisecond ints for
    durations and timestamps; the fields `body` leaves out take their schema default or a zero
    value (0, "", (), False, the zero UUID; None where the field is nullable)."""
    hints = typing.get_type_hints(cls)
    unknown = set(body) - {f.name for f in dataclasses.fields(cls)}
    # A field of another version of the request is left out (a scenario describes a request once
    # for all the versions it sends); any other name is a mistake in the scenario.
    unknown -= _fields_of_any_version(cls.__api_key__)
    if unknown:
        raise KeyError(f"{cls.__module__}.{cls.__qualname__} has no field {sorted(unknown)}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        kafka_type = f.metadata.get("kafka_type")
        tp, optional = _unwrap(hints[f.name])
        if f.name in body and f.name in hints:
            kwargs[f.name] = _convert(kafka_type, tp, body[f.name])
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kwargs[f.name] = _zero(kafka_type, tp, optional)
    return cls(**kwargs)


def request(api_key: int, version: int, body: dict[str, Any]) -> Any:
    return make(load_request_schema(api_key, version), body)


# ---- responses to plain trees --------------------------------------------------------------------

class Ref(str):
    """An id a broker picked (a topic id, producer id, member id): normalised to an ordinal."""

    kind: str

    def __new__(cls, kind: str, value: str) -> Ref:
        ref = super().__new__(cls, value)
        ref.kind = kind
        return ref


# Ids whose "none" value (-1, "", 0 for member epochs) is kept as it is; producer id 0 is an id.
ID_NONE: dict[str, tuple[Any, ...]] = {"producer_id": (-1,)}
ID_FIELDS = {
    "producer_id": "pid", "member_id": "member", "leader": "member", "memberId": "member",
    "member_epoch_id": "member", "session_id": "session", "transactional_id_hash": "txn",
}
LOCATION_FIELDS = {"host": "<host>", "port": "<port>", "cluster_id": "<cluster-id>",
                   "client_host": "<host>"}
SORT_KEYS = ("name", "topic", "topic_name", "group_id", "partition_index", "partition", "api_key",
             "resource_name", "transactional_id", "key", "config_name", "entity_type", "producer_id",
             "member_id", "node_id", "broker_id", "user", "mechanism", "log_dir")


def decode_batches(data: bytes) -> list[dict[str, Any]]:
    """The record batches of a Fetch response's records as plain trees: each batch's header fields
    (CRC left out: it covers fields that legitimately differ) and its records or control record."""
    from minibroker.protocol.records import HEADER_SIZE, read_header
    from minibroker.protocol.records.codec import read_control_record
    from minibroker.protocol.records.varint import read_varint
    from minibroker.protocol.compression import decompress

    batches = []
    pos = 0
    while pos + HEADER_SIZE <= len(data):
        header = read_header(data, pos)
        if pos + header.size > len(data):
            batches.append({"partial_batch": True})
            break
        raw = data[pos:pos + header.size]
        batch: dict[str, Any] = {
            "base_offset": header.base_offset, "last_offset_delta": header.last_offset_delta,
            "partition_leader_epoch": header.partition_leader_epoch, "magic": header.magic,
            "attributes": header.attributes, "base_timestamp": header.base_timestamp,
            "max_timestamp": header.max_timestamp, "producer_id": header.producer_id,
            "producer_epoch": header.producer_epoch, "base_sequence": header.base_sequence,
            "records_count": header.records_count,
        }
        if header.is_control:
            control = read_control_record(raw)
            batch["control"] = {"type": control.type, "coordinator_epoch": control.coordinator_epoch}
        else:
            body = bytes(raw[HEADER_SIZE:])
            if header.compression:
                body = bytes(decompress(header.compression, body, 1 << 26))
            records = []
            p = 0
            for _ in range(header.records_count):
                length, p = read_varint(body, p)
                end = p + length
                attrs = body[p]
                ts_delta, q = read_varint(body, p + 1)
                off_delta, q = read_varint(body, q)
                fields = []
                for _k in range(2):
                    n, q = read_varint(body, q)
                    fields.append(None if n < 0 else body[q:q + n].decode("utf-8", "backslashreplace"))
                    q += max(n, 0)
                count, q = read_varint(body, q)
                headers = []
                for _h in range(count):
                    n, q = read_varint(body, q)
                    hk = body[q:q + n].decode()
                    q += n
                    n, q = read_varint(body, q)
                    headers.append([hk, None if n < 0 else body[q:q + n].decode("utf-8", "backslashreplace")])
                    q += max(n, 0)
                records.append({"attributes": attrs, "offset_delta": off_delta, "timestamp_delta": ts_delta,
                                "key": fields[0], "value": fields[1], "headers": headers})
                p = end
            batch["records"] = records
        batches.append(batch)
        pos += header.size
    return batches


def plain(value: Any, name: str = "") -> Any:
    """A kio object as nested dicts, lists and scalars (the ids brokers pick wrapped in `Ref`)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name), f.name) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list, frozenset, set)):
        return [plain(v, name) for v in value]
    if isinstance(value, enum.Enum):
        return int(value.value) if isinstance(value.value, int) else value.value
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return round((value - _EPOCH).total_seconds() * 1000)
    if isinstance(value, uuid.UUID):
        return "0" if value.int == 0 else Ref("uuid", str(value))
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        if name == "records":
            return decode_batches(data)
        return {"bytes": len(data)} if data else ""
    if (name in ID_FIELDS and isinstance(value, (int, str)) and not isinstance(value, bool)
            and value not in ID_NONE.get(name, (-1, 0, ""))):
        return Ref(ID_FIELDS[name], str(value))
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return value


# ---- normalising and comparing -------------------------------------------------------------------

def normalise(observations: list[dict[str, Any]], started_ms: int, ended_ms: int) -> list[dict[str, Any]]:
    """Ids to ordinals in order of first appearance, locations and wall-clock times to placeholders,
    error messages to their presence; lists of named things keyed by name.

    Lists are put in name order before ids are numbered (so that two brokers answering one request's
    items in different orders number them alike), and keyed once the ids are numbered."""
    ordinals: dict[tuple[str, str], str] = {}
    counts: dict[str, int] = {}

    def walk(value: Any, name: str) -> Any:
        if isinstance(value, Ref):
            key = (value.kind, str(value))
            if key not in ordinals:
                counts[value.kind] = counts.get(value.kind, 0) + 1
                ordinals[key] = f"{value.kind}#{counts[value.kind]}"
            return ordinals[key]
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, name) for v in value]
        if name in LOCATION_FIELDS and value not in (None, "", -1):
            return LOCATION_FIELDS[name]
        if name.endswith("error_message"):
            return "<message>" if value else None
        if (isinstance(value, int) and not isinstance(value, bool)
                and started_ms - WALL_CLOCK_WINDOW_MS <= value <= ended_ms + WALL_CLOCK_WINDOW_MS):
            return "<now>"
        return value

    return [_order(walk(_order(o, keyed=False), ""), keyed=True) for o in observations]


# Lists whose order carries no meaning and whose items have no name to sort by: sorted as they are
# (SaslHandshake's mechanisms, DescribeClientQuotas' entries, the ACLs of DescribeAcls and DeleteAcls).
UNORDERED = {"mechanisms", "entries", "acls", "matching_acls"}


def _order(value: Any, *, keyed: bool, name: str = "") -> Any:
    """Lists of dicts that share a naming field (SORT_KEYS): sorted by it (ids, not yet numbered,
    left where they are), or with `keyed`, turned into a dict keyed `[value]` by it when its values
    are unique (so that an item one broker lacks shows as one difference, not a shifted list)."""
    if isinstance(value, dict):
        return {k: _order(v, keyed=keyed, name=k) for k, v in value.items()}
    if not isinstance(value, list):
        return value
    items = [_order(v, keyed=keyed) for v in value]
    if name in UNORDERED:
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True, default=str))
    if not items or not all(isinstance(v, dict) for v in items):
        return items
    if "records_count" in items[0] or "offset_delta" in items[0]:
        return items  # record batches and records: their order is the log's
    for key in SORT_KEYS:
        if not all(key in v for v in items):
            continue
        if not keyed:
            if any(isinstance(v[key], Ref) for v in items):
                # Ids each broker allocates in increasing order (producer ids) sort by their value:
                # the order a broker lists them in may follow its hash map's (Kafka's).
                if all(isinstance(v[key], Ref) and v[key].kind == "pid" and v[key].isdigit() for v in items):
                    return sorted(items, key=lambda v: int(v[key]))
                continue
            return sorted(items, key=lambda v: (str(type(v[key])), str(v[key])))
        names = [f"[{v[key]}]" for v in items]
        if len(set(names)) == len(names):
            return dict(sorted(zip(names, items)))
        return sorted(items, key=lambda v: (str(type(v[key])), str(v[key])))
    return items


def _throttles_equal(a: Any, b: Any) -> bool:
    if not (isinstance(a, int) and isinstance(b, int)):
        return a == b
    if a == 0 or b == 0:
        return a == b
    relative, absolute = THROTTLE_TOLERANCE
    return abs(a - b) <= max(absolute, relative * max(a, b))


def compare(kafka: Any, mini: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """The differences between two normalised trees: (path, Kafka's value, minibroker's value)."""
    if isinstance(kafka, dict) and isinstance(mini, dict):
        out = []
        for key in list(kafka) + [k for k in mini if k not in kafka]:
            name = str(key)
            sub = f"{path}{name}" if name.startswith("[") else (f"{path}.{name}" if path else name)
            if key not in kafka:
                out.append((sub, "<absent>", mini[key]))
            elif key not in mini:
                out.append((sub, kafka[key], "<absent>"))
            elif name.startswith("throttle_time"):
                if not _throttles_equal(kafka[key], mini[key]):
                    out.append((sub, kafka[key], mini[key]))
            else:
                out += compare(kafka[key], mini[key], sub)
        return out
    if isinstance(kafka, list) and isinstance(mini, list):
        out = []
        for i in range(max(len(kafka), len(mini))):
            sub = f"{path}[{i}]"
            if i >= len(kafka):
                out.append((sub, "<absent>", mini[i]))
            elif i >= len(mini):
                out.append((sub, kafka[i], "<absent>"))
            else:
                out += compare(kafka[i], mini[i], sub)
        return out
    return [] if kafka == mini else [(path, kafka, mini)]


# ---- running a scenario against one broker --------------------------------------------------------

@dataclass
class Target:
    """One broker under comparison: where it listens."""

    name: str  # "kafka" or "minibroker"
    bootstrap: str
    sasl_bootstrap: str | None = None


class Connection:
    def __init__(self, address: str, client_id: str, timeout: float, source_ip: str | None = None) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout,
                                             source_address=(source_ip, 0) if source_ip else None)
        self.client_id = client_id
        self.correlation_id = 0
        self.pending: list[tuple[int, Any]] = []

    def send(self, req: Any) -> None:
        self.correlation_id += 1
        self.sock.sendall(encode_request(req, self.correlation_id, self.client_id))
        self.pending.append((self.correlation_id, req))

    def _recv_exact(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def recv(self) -> Any:
        correlation_id, req = self.pending.pop(0)
        (size,) = struct.unpack(">i", self._recv_exact(4))
        frame = self._recv_exact(size)
        try:
            got, response = decode_response(req.__api_key__, req.__version__, frame)
        except OutOfBoundValue as exc:
            # kio refuses some values both brokers send (a -1 timestamp: DescribeTransactions'
            # start time of a transactional id with no transaction open): recorded as such.
            return Undecodable(str(exc))
        assert got == correlation_id, (got, correlation_id)
        return response

    def closed_by_peer(self, wait: float = 2.0) -> bool:
        self.sock.settimeout(wait)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def close(self) -> None:
        self.sock.close()


class StepFailed(Exception):
    pass


@dataclass
class Undecodable:
    """A response kio cannot decode (see Connection.recv): its reason is what is compared."""

    undecodable: str


class Run:
    """One scenario against one broker: its connections, names and recording."""

    def __init__(self, scenario: Scenario, target: Target, timeout: float = 30.0, java: Any = None) -> None:
        self.scenario = scenario
        self.target = target
        self.timeout = timeout
        self._java = java
        self.observations: list[dict[str, Any]] = []
        self.connections: dict[str, Connection] = {}
        self.vars: dict[str, Any] = {}

    @property
    def bootstrap(self) -> str:
        return self.target.bootstrap

    @property
    def java(self) -> Any:
        """The Java client (tests.support.java_client.JavaClient) for a scenario that drives it."""
        if self._java is None:
            raise RuntimeError("this scenario drives the Java client, and none was given: run_corpus(java=...) "
                               "(scripts/fetch_java_clients installs the jars)")
        return self._java

    @property
    def sasl_bootstrap(self) -> str:
        assert self.target.sasl_bootstrap, "this broker has no SASL listener"
        return self.target.sasl_bootstrap

    def name(self, suffix: str = "") -> str:
        """A topic, group or transactional id name of this scenario's own (the same on both brokers)."""
        base = "cf-" + self.scenario.name.replace("/", "-")
        return f"{base}-{suffix}" if suffix else base

    def conn(self, name: str = "main", *, sasl: bool = False, client_id: str = "conformance",
             source_ip: str | None = None) -> Connection:
        """The connection `name`, opened on first use (from `source_ip`, another loopback address
        such as 127.0.0.2, for a scenario whose IP quotas must not touch the others')."""
        if name not in self.connections:
            address = self.sasl_bootstrap if sasl else self.bootstrap
            self.connections[name] = Connection(address, client_id, self.timeout, source_ip)
        return self.connections[name]

    def close(self, name: str = "main") -> None:
        conn = self.connections.pop(name, None)
        if conn is not None:
            conn.close()

    def send(self, api_key: int, version: int, body: dict[str, Any], *, conn: str = "main",
             answered: bool = True) -> None:
        """Send without waiting (`recv` takes the response); `answered=False` for a request the
        broker does not answer (Produce with acks=0)."""
        c = self.conn(conn)
        c.send(request(api_key, version, body))
        if not answered:
            c.pending.pop()

    def recv(self, *, conn: str = "main", label: str | None = None, record: bool = True,
             drop: tuple[str, ...] = ()) -> Any:
        c = self.conn(conn)
        _, req = c.pending[0]
        response = c.recv()
        if record:
            self.record(label or f"{api_name(req.__api_key__)} v{req.__version__}", response, drop=drop)
        return response

    def call(self, api_key: int, version: int, body: dict[str, Any], *, conn: str = "main",
             label: str | None = None, record: bool = True, drop: tuple[str, ...] = ()) -> Any:
        """Send a request and wait for its response; the response is recorded (under `label`, by
        default the API's name and version) unless `record` is False. `drop`: field names left out
        of the recording (each drop says in the scenario why the field legitimately differs)."""
        self.send(api_key, version, body, conn=conn)
        return self.recv(conn=conn, label=label, record=record, drop=drop)

    def record(self, label: str, response: Any, *, drop: tuple[str, ...] = ()) -> None:
        tree = plain(response)
        if drop:
            tree = _drop(tree, set(drop))
        self.observations.append({"step": label, "response": tree})

    def note(self, label: str, value: Any) -> None:
        """Record an observation of the scenario's own (a real client's results, a state polled)."""
        self.observations.append({"step": label, "value": plain(value)})

    def wait_until(self, check: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            result = check()
            if result:
                return result
            if time.monotonic() > deadline:
                raise StepFailed(f"condition not met within {timeout} s")
            time.sleep(interval)

    def finish(self) -> None:
        for conn in self.connections.values():
            conn.close()
        self.connections.clear()


def _drop(tree: Any, names: set[str]) -> Any:
    if isinstance(tree, dict):
        return {k: _drop(v, names) for k, v in tree.items() if k not in names}
    if isinstance(tree, list):
        return [_drop(v, names) for v in tree]
    return tree


# ---- the registry -----------------------------------------------------------------------------------

@dataclass
class Scenario:
    name: str
    fn: Callable[[Run], None]
    apis: tuple[int, ...]  # the API keys it exercises (the coverage test reads them)
    doc: str = ""
    clients: tuple[str, ...] = ()  # real client libraries it drives


SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str, *, apis: tuple[int, ...] | list[int], clients: tuple[str, ...] = ()
             ) -> Callable[[Callable[[Run], None]], Callable[[Run], None]]:
    """Register a scenario: `@scenario("area/what", apis=(19, 3))` over `def _(run): ...`."""

    def register(fn: Callable[[Run], None]) -> Callable[[Run], None]:
        assert name not in SCENARIOS, f"scenario {name} registered twice"
        SCENARIOS[name] = Scenario(name, fn, tuple(apis), (fn.__doc__ or "").strip(), clients)
        return fn

    return register


def load_corpus() -> dict[str, Scenario]:
    import importlib
    import pkgutil

    import tests.conformance.corpus as corpus

    for module in pkgutil.iter_modules(corpus.__path__):
        importlib.import_module(f"{corpus.__name__}.{module.name}")
    return SCENARIOS


# ---- deliberate differences -----------------------------------------------------------------------

@dataclass
class Difference:
    id: str
    title: str
    reason: str
    scenarios: tuple[str, ...]
    paths: tuple[str, ...]
    kafka: str = ""  # what Kafka does, in a line
    minibroker: str = ""  # what minibroker does, in a line
    revert: str = ""  # how to get Kafka's behaviour, where a setting gives it
    # When set: the difference is only this one when Kafka's / minibroker's value, as Python's repr
    # of the normalised value ("None", "'<message>'", "46"), is this.
    kafka_value: str | None = None
    minibroker_value: str | None = None

    def matches(self, scenario: str, diff: tuple[str, Any, Any]) -> bool:
        path, kafka, mini = diff
        # Patterns use * and ? only: a [ is literal (paths name keyed items: configs[retention.ms]).
        return (any(fnmatch.fnmatchcase(scenario, s) for s in self.scenarios)
                and any(fnmatch.fnmatchcase(path, p.replace("[", "[[]")) for p in self.paths)
                and (self.kafka_value is None or repr(kafka) == self.kafka_value)
                and (self.minibroker_value is None or repr(mini) == self.minibroker_value))


def load_differences(path: Path = DIFFERENCES) -> list[Difference]:
    data = tomllib.loads(path.read_text())
    out = []
    for entry in data.get("difference", []):
        out.append(Difference(
            id=entry["id"], title=entry["title"], reason=entry["reason"].strip(),
            scenarios=tuple(entry["scenarios"]), paths=tuple(entry["paths"]),
            kafka=entry.get("kafka", ""), minibroker=entry.get("minibroker", ""),
            revert=entry.get("revert", ""), kafka_value=entry.get("kafka_value"),
            minibroker_value=entry.get("minibroker_value"),
        ))
    ids = [d.id for d in out]
    assert len(ids) == len(set(ids)), "difference ids must be unique"
    return out


def render_differences(differences: list[Difference]) -> str:
    """docs/differences.md, generated from tests/conformance/differences.toml."""
    lines = [
        "# Differences from Apache Kafka",
        "",
        "minibroker answers as Apache Kafka 4.4 does, checked by the conformance corpus (see",
        "[conformance](conformance.md)): every scenario runs against Kafka itself and against minibroker, and",
        "every difference between their answers is either fixed or listed here, with the reason. The",
        "corpus fails on a difference not listed here, so this list is complete for what the corpus covers.",
        "",
        "<!-- Generated from tests/conformance/differences.toml and docs/parts/differences-by-area.md by",
        "     `scripts/conformance --write-docs`; a test checks that this page matches them. Edit those,",
        "     not this page. -->",
        "",
    ]
    for d in differences:
        lines += [f"## {d.title}", ""]
        if d.kafka:
            lines += [f"- **Kafka 4.4:** {d.kafka}"]
        if d.minibroker:
            lines += [f"- **minibroker:** {d.minibroker}"]
        if d.revert:
            lines += [f"- **To get Kafka's behaviour:** {d.revert}"]
        if d.kafka or d.minibroker or d.revert:
            lines += [""]
        lines += [d.reason, "", f"<small>id `{d.id}`; scenarios: {', '.join(f'`{s}`' for s in d.scenarios)}</small>", ""]
    if DIFFERENCES_BY_AREA.is_file():
        lines += [DIFFERENCES_BY_AREA.read_text().rstrip()]
    return "\n".join(lines).rstrip() + "\n"


# ---- running the corpus -----------------------------------------------------------------------------

@dataclass
class Outcome:
    scenario: Scenario
    kafka: list[dict[str, Any]]
    minibroker: list[dict[str, Any]]
    diffs: list[tuple[str, Any, Any]]
    deliberate: dict[str, list[tuple[str, Any, Any]]] = field(default_factory=dict)  # id -> diffs
    undocumented: list[tuple[str, Any, Any]] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None  # a harness error (the scenario's own bug): counted as undocumented

    @property
    def verdict(self) -> str:
        if self.error or self.undocumented:
            return "undocumented"
        return "deliberate" if self.deliberate else "identical"


# What a broker can legitimately make a step do: close the connection, time out, not reach a state.
OBSERVABLE_FAILURES = (ConnectionError, OSError, StepFailed)


def _observe(scenario: Scenario, target: Target, java: Any = None
             ) -> tuple[list[dict[str, Any]], int, int, str | None]:
    """The scenario's recording against one broker, its start and end (ms), and the traceback of a
    harness error (a bug in the scenario, which fails it whatever the brokers answered)."""
    run = Run(scenario, target, java=java)
    started = time.time_ns() // 1_000_000
    error = None
    try:
        scenario.fn(run)
    except OBSERVABLE_FAILURES as exc:  # a step that failed is an observation too: where, and what
        run.observations.append({"step": "failed", "error": type(exc).__name__,
                                 "where": traceback.extract_tb(exc.__traceback__)[-1].lineno})
    except Exception:
        error = f"{target.name}: {traceback.format_exc()}"
    finally:
        run.finish()
    return run.observations, started, time.time_ns() // 1_000_000, error


def run_scenario(scenario: Scenario, kafka: Target, mini: Target, differences: list[Difference],
                 java: Any = None) -> Outcome:
    started = time.monotonic()
    if scenario.clients:
        # A real client's story mostly waits (group joins, polls, a JVM's start): told to both
        # brokers at once, in two threads. Raw scenarios, whose throttle times and waits are
        # compared, run one broker after the other.
        with concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="conformance") as pool:
            kafka_future = pool.submit(_observe, scenario, kafka, java)
            mini_raw, m0, m1, mini_error = _observe(scenario, mini, java)
            kafka_raw, k0, k1, kafka_error = kafka_future.result()
    else:
        kafka_raw, k0, k1, kafka_error = _observe(scenario, kafka, java)
        mini_raw, m0, m1, mini_error = _observe(scenario, mini, java)
    kafka_obs = normalise(kafka_raw, k0, k1)
    mini_obs = normalise(mini_raw, m0, m1)
    diffs = compare(_by_step(kafka_obs), _by_step(mini_obs))
    outcome = Outcome(scenario, kafka_obs, mini_obs, diffs, seconds=time.monotonic() - started,
                      error="\n".join(e for e in (kafka_error, mini_error) if e) or None)
    for diff in diffs:
        matched = [d for d in differences if d.matches(scenario.name, diff)]
        if matched:
            outcome.deliberate.setdefault(matched[0].id, []).append(diff)
        else:
            outcome.undocumented.append(diff)
    return outcome


def _by_step(observations: list[dict[str, Any]]) -> dict[str, Any]:
    """Observations keyed `N:label` so that a difference's path names its step."""
    out: dict[str, Any] = {}
    for i, o in enumerate(observations):
        rest = {k: v for k, v in o.items() if k != "step"}
        out[f"{i}:{o['step']}"] = rest.get("response", rest.get("value", rest))
    return out


def run_corpus(kafka: Target, mini: Target, scenarios: list[Scenario] | None = None,
               differences: list[Difference] | None = None, java: Any = None) -> Iterator[Outcome]:
    """Each scenario against both brokers; `java`, a tests.support.java_client.JavaClient, for the
    scenarios that drive the Java client (they fail without it)."""
    differences = load_differences() if differences is None else differences
    for s in scenarios if scenarios is not None else list(load_corpus().values()):
        yield run_scenario(s, kafka, mini, differences, java)


def summary(outcomes: list[Outcome]) -> str:
    identical = sum(o.verdict == "identical" for o in outcomes)
    deliberate = sum(o.verdict == "deliberate" for o in outcomes)
    undocumented = sum(o.verdict == "undocumented" for o in outcomes)
    return (f"{len(outcomes)} scenarios: {identical} identical, {deliberate} deliberate differences, "
            f"{undocumented} undocumented")


def describe(outcome: Outcome, *, verbose: bool = False) -> str:
    lines = [f"{outcome.scenario.name}: {outcome.verdict} ({outcome.seconds:.2f} s)"]
    for diff_id, diffs in outcome.deliberate.items():
        lines.append(f"  deliberate [{diff_id}]:")
        lines += [f"    {p}: kafka={k!r} minibroker={m!r}" for p, k, m in diffs[: None if verbose else 8]]
    if outcome.error:
        lines.append("  SCENARIO ERROR (a bug in the scenario):")
        lines += ["    " + line for line in outcome.error.splitlines()[-12:]]
    if outcome.undocumented:
        lines.append("  UNDOCUMENTED:")
        lines += [f"    {p}: kafka={k!r} minibroker={m!r}" for p, k, m in outcome.undocumented[: None if verbose else 30]]
    return "\n".join(lines)
