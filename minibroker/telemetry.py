"""Client telemetry (KIP-714; Kafka's ClientMetricsManager and ClientMetricsConfigs): clients push their
own metrics to the broker, and the broker shows them on its Prometheus endpoint.

Subscriptions are CLIENT_METRICS config resources (resource type 16), set with
IncrementalAlterConfigs (Kafka's `kafka-client-metrics.sh` / `kafka-configs.sh --entity-type
client-metrics`), read with DescribeConfigs and listed with ListConfigResources. A subscription has
three keys:
- `metrics`: metric name prefixes the matching clients push (`*`: all; empty: none);
- `interval.ms`: how often they push (100 to 3,600,000; default 300,000);
- `match`: `key=regex` selectors a client must all match, over client_instance_id, client_id,
  client_software_name, client_software_version, client_source_address, client_source_port (empty:
  every client).
Subscriptions are kept in `client-metrics.json` in the data directory (Kafka keeps them in its
metadata log). Removing every key of a subscription removes it.

A client asks GetTelemetrySubscriptions (a client instance id is assigned to a new client): the
metrics of every subscription it matches, the shortest of their intervals, and a subscription id
that changes whenever that set does (Kafka's CRC32C of the set and the interval, XOR the instance
id's hash). It then pushes (PushTelemetry) OpenTelemetry MetricsData (minibroker.protocol.otlp),
compressed with one of zstd, lz4, gzip or snappy, asked as deltas (Kafka asks for delta
temporality). Kafka's checks, in its order: a push after a terminating push INVALID_REQUEST; a push
(or a GetTelemetrySubscriptions) before the interval has passed since the last request
THROTTLING_QUOTA_EXCEEDED (the push right after a GetTelemetrySubscriptions is always taken); an
old subscription id UNKNOWN_SUBSCRIPTION_ID (the client asks again); an unknown compression type
UNSUPPORTED_COMPRESSION_TYPE; more than `telemetry.max.bytes` TELEMETRY_TOO_LARGE; a payload that
does not decompress or decode INVALID_RECORD.

What is pushed is kept per client instance (the last value of each gauge, the running total of each
delta sum or the last cumulative one) and rendered by minibroker.metrics_http as
`minibroker_client_<metric name>{client_id, client_instance_id, ...the point's attributes}`. A
client instance is forgotten after max(60 s, 3 push intervals) without a request; after its
terminating push it is no longer shown, and kept until then only to refuse its later pushes.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from crc32c import crc32c

from minibroker.protocol.compression import decompress
from minibroker.protocol.errors import ErrorCode
from minibroker.protocol.otlp import SUM, TEMPORALITY_DELTA, parse_metrics_data
from minibroker.storage.errors import DamagedFileError
from minibroker.storage.files import write_atomically

__all__ = ["ClientMetrics", "SubscriptionError", "SUBSCRIPTION_KEYS"]

log = logging.getLogger(__name__)

SUBSCRIPTIONS_FILE = "client-metrics.json"
METRICS, INTERVAL_MS, MATCH = "metrics", "interval.ms", "match"
SUBSCRIPTION_KEYS = (METRICS, INTERVAL_MS, MATCH)
DEFAULT_INTERVAL_MS = 300_000
MIN_INTERVAL_MS, MAX_INTERVAL_MS = 100, 3_600_000
MATCH_KEYS = ("client_instance_id", "client_id", "client_software_name", "client_software_version",
              "client_source_address", "client_source_port")
ALL_METRICS = "*"
# Kafka's order: the client takes the first it supports (zstd, lz4, gzip, snappy).
ACCEPTED_COMPRESSION = (4, 3, 1, 2)
CACHE_EXPIRY_MS = 60_000


class SubscriptionError(Exception):
    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


@dataclass(frozen=True)
class Subscription:
    name: str
    metrics: tuple[str, ...]
    interval_ms: int
    match: tuple[tuple[str, str], ...]  # (key, regex)

    def matches(self, selectors: dict[str, str]) -> bool:
        return all(re.fullmatch(pattern, selectors.get(key, "")) is not None for key, pattern in self.match)


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def validate(name: str, configs: dict[str, str]) -> Subscription:
    """Kafka's ClientMetricsConfigs.validate: INVALID_REQUEST naming what is wrong."""
    if not name:
        raise SubscriptionError(ErrorCode.invalid_request, "Subscription name can't be empty")
    unknown = sorted(set(configs) - set(SUBSCRIPTION_KEYS))
    if unknown:
        raise SubscriptionError(ErrorCode.invalid_request, f"Unknown client metrics configuration: {unknown}")
    try:
        interval = int(configs.get(INTERVAL_MS, DEFAULT_INTERVAL_MS))
    except ValueError:
        raise SubscriptionError(ErrorCode.invalid_config,
                                f"Invalid value {configs[INTERVAL_MS]} for configuration {INTERVAL_MS}: "
                                "Not a number of type INT") from None
    if not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
        raise SubscriptionError(ErrorCode.invalid_request,
                                f"Invalid value {interval} for {INTERVAL_MS}, interval must be between "
                                f"{MIN_INTERVAL_MS} and {MAX_INTERVAL_MS} (1 hour)")
    match = []
    for pair in _split(configs.get(MATCH, "")):
        key, sep, pattern = pair.partition("=")
        if not sep or not pattern:
            raise SubscriptionError(ErrorCode.invalid_request, f"Illegal client matching pattern: {pair}")
        if key.strip() not in MATCH_KEYS:
            raise SubscriptionError(ErrorCode.invalid_request, f"Invalid client matching pattern key: {key.strip()}")
        try:
            re.compile(pattern.strip())
        except re.error as exc:
            raise SubscriptionError(ErrorCode.invalid_request,
                                    f"Illegal regex pattern for client matching: {pattern.strip()} ({exc})") from None
        match.append((key.strip(), pattern.strip()))
    return Subscription(name, tuple(_split(configs.get(METRICS, ""))), interval, tuple(match))


@dataclass
class ClientInstance:
    instance_id: uuid.UUID
    selectors: dict[str, str]
    subscription_id: int
    metrics: tuple[str, ...]
    interval_ms: int
    version: int  # the subscriptions' version it was computed at
    last_get_ms: int = 0
    last_push_ms: int = 0
    # A GetTelemetrySubscriptions answered since the last accepted push (Kafka compares the two
    # timestamps; a flag does not mistake two requests in the same millisecond for none).
    got_since_push: bool = False
    last_seen_ms: int = 0
    terminating: bool = False
    last_error: ErrorCode = ErrorCode.none
    # (metric name, kind, point attributes) -> value
    values: dict[tuple[str, str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)
    pushes: int = 0


def _subscription_id(metrics: Iterable[str], interval_ms: int, instance_id: uuid.UUID) -> int:
    text = "[" + ", ".join(sorted(metrics)) + "]" + str(interval_ms)
    crc = crc32c(text.encode("utf-8"))
    java_hash = _java_uuid_hash(instance_id)
    value = (crc ^ java_hash) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _java_uuid_hash(instance_id: uuid.UUID) -> int:
    """Kafka's Uuid.hashCode: the two longs XORed, then the halves of that XORed."""
    high, low = instance_id.int >> 64, instance_id.int & ((1 << 64) - 1)
    mixed = high ^ low
    return ((mixed >> 32) ^ mixed) & 0xFFFFFFFF


class ClientMetrics:
    """The subscriptions and the client instances that push (Kafka's ClientMetricsManager)."""

    def __init__(self, subscriptions: dict[str, dict[str, str]], path: Path | None = None,
                 max_bytes: int = 1024 * 1024) -> None:
        self.configs = dict(subscriptions)  # name -> its keys as set
        self.subscriptions = {name: validate(name, keys) for name, keys in self.configs.items()}
        self.path = path
        self.max_bytes = max_bytes
        self.version = 0
        self.instances: dict[uuid.UUID, ClientInstance] = {}

    @classmethod
    def open(cls, data_dir: Path, max_bytes: int) -> ClientMetrics:
        path = data_dir / SUBSCRIPTIONS_FILE
        if not path.exists():
            return cls({}, path, max_bytes)
        try:
            stored = json.loads(path.read_bytes().decode("utf-8"))
            subscriptions = {str(name): {str(k): str(v) for k, v in keys.items()} for name, keys in stored.items()}
            return cls(subscriptions, path, max_bytes)
        except (OSError, ValueError, AttributeError, SubscriptionError) as exc:
            raise DamagedFileError(path, f"unreadable ({exc})", "restore it, or remove it to drop the subscriptions") from exc

    # -- subscriptions (CLIENT_METRICS config resources) -----------------------------------------

    def names(self) -> list[str]:
        return sorted(self.configs)

    def set(self, name: str, configs: dict[str, str], validate_only: bool = False) -> None:
        """A subscription's keys as an alter leaves them (empty: removed). SubscriptionError when
        they are not valid; an OSError (the data directory) changes nothing."""
        if configs:
            subscription = validate(name, configs)
        elif not name:
            raise SubscriptionError(ErrorCode.invalid_request, "Subscription name can't be empty")
        if validate_only or self.configs.get(name, {}) == configs:
            return
        stored = dict(self.configs)
        if configs:
            stored[name] = dict(configs)
        else:
            stored.pop(name, None)
        if self.path is not None:
            write_atomically(self.path, json.dumps(stored, indent=1, sort_keys=True).encode())
        self.configs = stored
        if configs:
            self.subscriptions[name] = subscription
        else:
            self.subscriptions.pop(name, None)
        self.version += 1
        log.info("client metrics subscription %s %s", name, f"set to {configs}" if configs else "removed")

    # -- GetTelemetrySubscriptions / PushTelemetry ------------------------------------------------

    def _instance(self, instance_id: uuid.UUID, selectors: dict[str, str], now_ms: int) -> ClientInstance:
        instance = self.instances.get(instance_id)
        if instance is None or instance.version < self.version:
            wanted: set[str] = set()
            interval = DEFAULT_INTERVAL_MS
            everything = False
            for subscription in self.subscriptions.values():
                if subscription.matches({**selectors, "client_instance_id": str(instance_id)}):
                    everything = everything or ALL_METRICS in subscription.metrics
                    wanted.update(subscription.metrics)
                    interval = min(interval, subscription.interval_ms)
            if everything:
                wanted = {ALL_METRICS}
            fresh = ClientInstance(instance_id, selectors, _subscription_id(wanted, interval, instance_id),
                                   tuple(sorted(wanted)), interval, self.version)
            if instance is not None:
                # The subscriptions changed: a new instance, as Kafka makes one (so the client gets
                # its new set at once, unthrottled), keeping what it pushed for the exposition.
                fresh.values, fresh.pushes = instance.values, instance.pushes
            instance = self.instances[instance_id] = fresh
        instance.last_seen_ms = now_ms
        return instance

    def get_subscriptions(self, instance_id: uuid.UUID | None, selectors: dict[str, str], now_ms: int) -> dict:
        """GetTelemetrySubscriptions' response fields."""
        self.expire(now_ms)
        if instance_id is None or instance_id.int == 0:
            instance_id = uuid.uuid4()
            while instance_id in self.instances:
                instance_id = uuid.uuid4()
        instance = self._instance(instance_id, selectors, now_ms)
        since = now_ms - max(instance.last_get_ms, instance.last_push_ms)
        if since < instance.interval_ms and instance.last_get_ms and instance.last_error not in (
                ErrorCode.unknown_subscription_id, ErrorCode.unsupported_compression_type):
            # Kafka's getErrorResponse: the error alone, the instance id left zero.
            return {"error_code": ErrorCode.throttling_quota_exceeded, "client_instance_id": uuid.UUID(int=0),
                    "subscription_id": 0, "accepted_compression_types": (), "push_interval": 0,
                    "telemetry_max_bytes": 0, "delta_temporality": False, "requested_metrics": ()}
        instance.last_get_ms = now_ms
        instance.got_since_push = True
        instance.last_error = ErrorCode.none
        return {
            "error_code": ErrorCode.none,
            "client_instance_id": instance_id,
            "subscription_id": instance.subscription_id,
            "accepted_compression_types": list(ACCEPTED_COMPRESSION),
            "push_interval": instance.interval_ms,
            "telemetry_max_bytes": self.max_bytes,
            "delta_temporality": True,
            "requested_metrics": list(instance.metrics),
        }

    def push(self, instance_id: uuid.UUID | None, subscription_id: int, terminating: bool, compression: int,
             payload: bytes, selectors: dict[str, str], now_ms: int) -> tuple[ErrorCode, str | None]:
        """PushTelemetry: (error, message)."""
        if instance_id is None or instance_id.int in (0, 1):  # Kafka's Uuid.RESERVED: ZERO and METADATA_TOPIC_ID
            return ErrorCode.invalid_request, f"Invalid request from the client [{instance_id}], invalid client instance id"
        self.expire(now_ms)
        instance = self._instance(instance_id, selectors, now_ms)
        error, message = self._check_push(instance, subscription_id, terminating, compression, payload, now_ms)
        instance.terminating = terminating
        if error:
            instance.last_error = error
            return error, message
        if payload:
            try:
                # A payload may not decompress past 64 times telemetry.max.bytes (a bomb costs one push).
                data = decompress(compression, payload, self.max_bytes * 64) if compression else payload
                _resource, metrics = parse_metrics_data(bytes(data))
            except Exception as exc:  # noqa: BLE001 - any undecodable payload is the client's INVALID_RECORD
                instance.last_error = ErrorCode.invalid_record
                log.warning("client instance %s pushed metrics that do not decode: %s", instance_id, exc)
                return ErrorCode.invalid_record, f"The metrics could not be decoded: {exc}"
            self._record(instance, metrics)
            instance.pushes += 1
        instance.last_error = ErrorCode.none
        return ErrorCode.none, None

    def _check_push(self, instance: ClientInstance, subscription_id: int, terminating: bool, compression: int,
                    payload: bytes, now_ms: int) -> tuple[ErrorCode, str | None]:
        who = instance.instance_id
        if instance.terminating:
            return ErrorCode.invalid_request, (f"Client [{who}] sent the previous request with state terminating to "
                                               "TRUE, can not accept any requests after that")
        accept = instance.got_since_push or \
            now_ms - max(instance.last_get_ms, instance.last_push_ms) >= instance.interval_ms
        if accept:
            instance.last_push_ms = now_ms
            instance.got_since_push = False
        elif not terminating:
            return ErrorCode.throttling_quota_exceeded, \
                f"Request from the client [{who}] arrived before the next push interval time"
        if subscription_id != instance.subscription_id:
            return ErrorCode.unknown_subscription_id, f"Unknown client subscription id for the client [{who}]"
        if compression not in (0, 1, 2, 3, 4):
            return ErrorCode.unsupported_compression_type, \
                f"Unknown compression type [{compression}] is received in telemetry request from [{who}]"
        if len(payload) > self.max_bytes:
            return ErrorCode.telemetry_too_large, \
                f"Telemetry request from [{who}] is larger than the maximum allowed size [{self.max_bytes}]"
        return ErrorCode.none, None

    @staticmethod
    def _record(instance: ClientInstance, metrics) -> None:
        values = instance.values
        for metric in metrics:
            for point in metric.points:
                key = (metric.name, "counter" if metric.kind == SUM and metric.monotonic else "gauge", point.attributes)
                if metric.kind == SUM and metric.temporality == TEMPORALITY_DELTA:
                    values[key] = values.get(key, 0.0) + point.value
                else:
                    values[key] = point.value

    def expire(self, now_ms: int) -> None:
        """Forget the instances silent for max(60 s, 3 push intervals), as Kafka's expiration timer."""
        gone = [iid for iid, inst in self.instances.items()
                if now_ms - inst.last_seen_ms > max(CACHE_EXPIRY_MS, 3 * inst.interval_ms)]
        for iid in gone:
            del self.instances[iid]
