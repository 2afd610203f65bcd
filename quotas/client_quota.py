"""Per-client quota managers: record what a request cost, return how long to throttle it.

Follows Kafka's ``core/.../server/ClientQuotaManager.scala`` (Produce and Fetch byte rates),
``ClientRequestQuotaManager.scala`` (request time as a percentage of one thread) and
``ControllerMutationQuotaManager.scala`` (KIP-599 token bucket), with ``QuotaUtils.java`` for the
throttle time. Pure: ``now_ms`` is always an argument; the shell mutes the connection for the
returned time (KIP-219) and calls ``expire_sensors`` now and then.

How a handler uses them (Kafka ``KafkaApis``):

- Produce: ``bw = produce.record_and_get_throttle_time_ms(user, client, request_size, now)``;
  ``rq = request.record_request_time_and_get_throttle_time_ms(...)`` unless acks=0 (then 0); the
  records are appended regardless. ``combine_throttle_time_ms(bw, rq)`` gives the
  ``throttle_time_ms`` of the response and which manager's ``record_throttle_time`` to call.
- Fetch: cap the fetch size at ``fetch.max_value_in_quota_window(...)``; record the request time and
  the response size; if either throttles, ``fetch.unrecord_quota_sensor(...)`` and answer with an
  empty throttled response.
- Everything else: the request quota only.

One ``DefaultQuotaCallback`` may serve every manager (its quotas are kept per type). Change quotas
through the managers (``update_quota`` / ``remove_quota`` / ``apply_config_change``), not on the
callback directly: a manager caches which sensor a (principal, client-id) maps to and drops that
cache on each change.

Two algorithms (``quota.algorithm``): ``sampled``, the default, is Kafka's windowed ``Rate``
(``quota.window.num`` samples of ``quota.window.size.seconds``); ``token_bucket`` enforces the same
limits with a KIP-599 ``TokenBucket`` (burst ``quota.window.num * quota.window.size.seconds * limit``,
refilled at the limit), as Redpanda and Kafka's controller-mutation quota do. A sampled rate lets a
greedy client through in bursts whenever old samples expire; a bucket admits the burst once and
the limit from then on. Under ``token_bucket`` a sensor still keeps a ``Rate`` beside its bucket,
so the ``byte-rate`` / ``request-time`` metrics mean what they mean under ``sampled``, and its
balance is published as ``tokens``. Throttle times follow each stat's own arithmetic:
``(observed - limit) / limit * window`` for the rate, ``-tokens / limit`` for the bucket.

Until a quota of its type has been configured (or a custom callback is in use) a manager records
nothing and returns 0, as Kafka's ``maybeRecordAndGetThrottleTimeMs``; so no sensors and no metrics
exist for an unquota'd broker.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Final

from minibroker.quotas.callback import (
    CLIENT_ID_TAG,
    USER_TAG,
    ClientQuotaCallback,
    ClientQuotaEntity,
    DEFAULT,
    DefaultQuotaCallback,
    QuotaType,
)
from minibroker.quotas.rate import Avg, MetricConfig, QuotaViolation, Rate, Sensor, TokenBucket

__all__ = [
    "QUOTA_ALGORITHMS",
    "SAMPLED",
    "TOKEN_BUCKET",
    "ClientQuotaManager",
    "ClientRequestQuotaManager",
    "ClientSensors",
    "ControllerMutationQuota",
    "ControllerMutationQuotaManager",
    "INACTIVE_SENSOR_EXPIRATION_MS",
    "QuotaType",
    "THROTTLE_TIME_METRIC_CONFIG",
    "UNBOUNDED_CONTROLLER_MUTATION_QUOTA",
    "combine_throttle_time_ms",
]

# Kafka ClientQuotaManager.InactiveSensorExpirationTimeSeconds: sensors idle for an hour go.
INACTIVE_SENSOR_EXPIRATION_MS: Final = 3600 * 1000

# The throttle-time average uses the broker's general metric config, not the quota window:
# metrics.num.samples=2, metrics.sample.window.ms=30000.
THROTTLE_TIME_METRIC_CONFIG: Final = MetricConfig(samples=2, window_ms=30_000)

# quota.algorithm values: Kafka's windowed rate, or a KIP-599 token bucket.
SAMPLED: Final = "sampled"
TOKEN_BUCKET: Final = "token_bucket"
QUOTA_ALGORITHMS: Final = (SAMPLED, TOKEN_BUCKET)

# 100% = one thread busy for the whole second: percent-seconds per nanosecond of thread time.
NANOS_TO_PERCENTAGE_PER_SECOND: Final = 100.0 / 1e9


def combine_throttle_time_ms(bandwidth_throttle_ms: int, request_throttle_ms: int) -> tuple[int, bool]:
    """Produce/Fetch: the response carries the larger throttle time.

    Returns ``(throttle_time_ms, bandwidth_charged)``: the byte-rate manager's throttle-time metric
    is charged when its throttle is strictly larger, otherwise the request manager's (KafkaApis).
    """
    if bandwidth_throttle_ms > request_throttle_ms:
        return bandwidth_throttle_ms, True
    return request_throttle_ms, False


class ClientSensors:
    """The sensors of one quota: clients whose metric tags are equal share them."""

    __slots__ = ("metric_tags", "quota_sensor", "throttle_time")

    def __init__(self, metric_tags: dict[str, str], quota_sensor: Sensor, throttle_time: Avg) -> None:
        self.metric_tags = metric_tags
        self.quota_sensor = quota_sensor
        self.throttle_time = throttle_time

    def __repr__(self) -> str:
        return f"ClientSensors({self.metric_tags}, {self.quota_sensor!r})"


class ClientQuotaManager:
    """Byte-rate quotas (Produce, Fetch), one sensor per distinct metric tags."""

    quota_metric_name = "byte-rate"

    def __init__(
        self,
        quota_type: QuotaType,
        callback: ClientQuotaCallback | None = None,
        metric_config: MetricConfig = MetricConfig(),
        *,
        throttle_time_config: MetricConfig = THROTTLE_TIME_METRIC_CONFIG,
        sensor_expiration_ms: int = INACTIVE_SENSOR_EXPIRATION_MS,
        algorithm: str = SAMPLED,
    ) -> None:
        if algorithm not in QUOTA_ALGORITHMS:
            raise ValueError(f"quota algorithm must be one of {', '.join(QUOTA_ALGORITHMS)}, not {algorithm!r}")
        self.algorithm = algorithm
        self.quota_type = quota_type
        self.callback: ClientQuotaCallback = callback if callback is not None else DefaultQuotaCallback()
        self.metric_config = metric_config
        self.throttle_time_config = throttle_time_config
        self.sensor_expiration_ms = sensor_expiration_ms
        # The default callback is asked through its tuple-returning methods: no dict per request.
        self._default_callback: DefaultQuotaCallback | None = (
            self.callback if type(self.callback) is DefaultQuotaCallback else None
        )
        # Kafka: a custom callback enables quotas from the start; the default one once any quota of
        # this type is configured, and they stay enabled until restart.
        self.quotas_enabled = self._default_callback is None
        self._sensors: dict[Hashable, ClientSensors] = {}
        # Default callback only: (principal, client-id) -> its sensors, skipping the precedence walk.
        # Tags change only when a quota does, or when sensors expire: both clear it.
        self._by_client: dict[tuple[str, str], ClientSensors] = {}

    # -- the request path ---------------------------------------------------------------------

    def record_and_get_throttle_time_ms(self, principal: str, client_id: str, value: float, now_ms: int) -> int:
        """Record ``value`` against the client's quota, then check it; 0 if within the quota."""
        if not self.quotas_enabled:
            return 0
        violation = self._sensors_for(principal, client_id, now_ms).quota_sensor.record(value, now_ms)
        return 0 if violation is None else self._throttle_time_ms(violation)

    def record_no_throttle(self, principal: str, client_id: str, value: float, now_ms: int) -> None:
        """Record without checking; the next checked record pays for it."""
        if self.quotas_enabled:
            self._sensors_for(principal, client_id, now_ms).quota_sensor.record(value, now_ms, False)

    def unrecord_quota_sensor(self, principal: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a recording (a throttled Fetch returns nothing, so it must not count).

        Records ``-value``: a rate keeps per-window sums, so this restores the previous total.
        """
        self.record_no_throttle(principal, client_id, -value, now_ms)

    def record_throttle_time(self, principal: str, client_id: str, throttle_time_ms: int, now_ms: int) -> None:
        """Feed the ``throttle-time`` average (Kafka does this when it throttles the channel)."""
        if throttle_time_ms > 0 and self.quotas_enabled:
            self._sensors_for(principal, client_id, now_ms).throttle_time.record(throttle_time_ms, now_ms)

    def quota_limit(self, principal: str, client_id: str) -> float | None:
        """The limit that applies to this client now, ``None`` if unlimited."""
        cb = self._default_callback
        if cb is not None:
            return cb.limit_for_tag_values(self.quota_type, *cb.metric_tag_values(self.quota_type, principal, client_id))
        tags = self.callback.quota_metric_tags(self.quota_type, principal, client_id)
        return self.callback.quota_limit(self.quota_type, tags)

    def max_value_in_quota_window(self, principal: str, client_id: str) -> float:
        """The most one request may record without being throttled for sure (the Fetch size cap):
        ``quota * (samples - 1) * window_s``; ``math.inf`` when unlimited."""
        if not self.quotas_enabled:
            return math.inf
        limit = self.quota_limit(principal, client_id)
        if limit is None:
            return math.inf
        return limit * (self.metric_config.samples - 1) * self.metric_config.window_ms / 1000.0

    def _throttle_time_ms(self, violation: QuotaViolation) -> int:
        return violation.throttle_time_ms

    def _sensors_for(self, principal: str, client_id: str, now_ms: int) -> ClientSensors:
        qt = self.quota_type
        cb = self._default_callback
        if cb is not None:
            sensors = self._by_client.get((principal, client_id))
            if sensors is None:
                key = cb.metric_tag_values(qt, principal, client_id)
                sensors = self._sensors.get(key)
                if sensors is None:
                    user_tag, client_tag = key
                    sensors = self._create_sensors(key, {USER_TAG: user_tag, CLIENT_ID_TAG: client_tag}, now_ms)
                self._by_client[(principal, client_id)] = sensors
            return sensors
        tags = self.callback.quota_metric_tags(qt, principal, client_id)
        tag_set = frozenset(tags.items())
        sensors = self._sensors.get(tag_set)
        if sensors is None:
            sensors = self._create_sensors(tag_set, dict(tags), now_ms)
        if self.callback.quota_reset_required(qt):
            self.refresh_quota_bounds()
        return sensors

    def _create_sensors(self, key: Hashable, tags: dict[str, str], now_ms: int) -> ClientSensors:
        bound = self.callback.quota_limit(self.quota_type, tags)
        sensors = ClientSensors(tags, self._new_quota_sensor(bound, now_ms), Avg(self.throttle_time_config))
        self._sensors[key] = sensors
        return sensors

    def _new_quota_sensor(self, bound: float | None, now_ms: int) -> Sensor:
        if self.algorithm == TOKEN_BUCKET:
            return Sensor(TokenBucket(self.metric_config), bound, now_ms, observed=Rate(self.metric_config))
        return Sensor(Rate(self.metric_config), bound, now_ms)

    # -- configuration --------------------------------------------------------------------------

    def update_quota(self, entity: ClientQuotaEntity, value: float) -> None:
        """Set a quota of this manager's type on ``entity`` and apply it to live sensors."""
        self.quotas_enabled = True
        self.callback.update_quota(self.quota_type, entity, value)
        self.refresh_quota_bounds(entity)

    def reconfigure(self, metric_config: MetricConfig) -> None:
        """A new rate window (the broker's quota.window.* changed at runtime): every client starts
        afresh in it, as a sensor's samples cannot be re-cut to another window."""
        self.metric_config = metric_config
        self._sensors.clear()
        self._by_client.clear()

    def remove_quota(self, entity: ClientQuotaEntity) -> None:
        self.quotas_enabled = True
        self.callback.remove_quota(self.quota_type, entity)
        self.refresh_quota_bounds(entity)

    def apply_config_change(self, entity: ClientQuotaEntity, key: str, value: float | None) -> bool:
        """Route one change from the quota store (``value`` ``None`` = removed).

        Ignores keys that are not this manager's type; returns whether it applied the change.
        """
        if QuotaType.for_config_key(key) is not self.quota_type:
            return False
        if value is None:
            self.remove_quota(entity)
        else:
            self.update_quota(entity, value)
        return True

    def refresh_quota_bounds(self, entity: ClientQuotaEntity | None = None) -> None:
        """Re-read the limit of live sensors (Kafka ``updateQuotaMetricConfigs``).

        With the default callback a change to a named (non-default) entity can only move the limit
        of the one sensor tagged with that entity's names; anything else re-reads every sensor.
        Call with no entity after ``callback.update_cluster_metadata(...)`` returned True.
        """
        qt = self.quota_type
        cb = self._default_callback
        self._by_client.clear()
        user, client_id = (entity.user, entity.client_id) if entity is not None else (None, None)
        if cb is not None and entity is not None and user is not DEFAULT and client_id is not DEFAULT:
            key = (user or "", client_id or "")
            sensors = self._sensors.get(key)
            if sensors is not None:
                sensors.quota_sensor.bound = cb.limit_for_tag_values(qt, *key)
            return
        for sensors in self._sensors.values():
            sensors.quota_sensor.bound = self.callback.quota_limit(qt, sensors.metric_tags)

    # -- housekeeping ---------------------------------------------------------------------------

    def expire_sensors(self, now_ms: int) -> int:
        """Drop the sensors of quotas idle for longer than ``sensor_expiration_ms``; return how many.

        A quota's state is its quota sensor; the throttle-time average is recorded only alongside
        it, so both go together.
        """
        expired = [
            key
            for key, sensors in self._sensors.items()
            if now_ms - sensors.quota_sensor.last_record_ms > self.sensor_expiration_ms
        ]
        for key in expired:
            del self._sensors[key]
        if expired:
            self._by_client.clear()
        return len(expired)

    def metrics_snapshot(self, now_ms: int) -> list[tuple[str, str, dict[str, str], float]]:
        """``(group, name, tags, value)`` for each live quota: its rate and its throttle-time average
        (NaN when nothing was throttled in the throttle-time window, as Kafka reports it)."""
        group = self.quota_type.group
        out: list[tuple[str, str, dict[str, str], float]] = []
        for sensors in self._sensors.values():
            tags = dict(sensors.metric_tags)
            quota_sensor = sensors.quota_sensor
            if quota_sensor.observed is not None:  # token_bucket: the rate, then the bucket's balance
                out.append((group, self.quota_metric_name, tags, quota_sensor.observed.measure(now_ms)))
                out.append((group, "tokens", dict(tags), quota_sensor.measure(now_ms)))
            else:
                out.append((group, self.quota_metric_name, tags, quota_sensor.measure(now_ms)))
            out.append((group, "throttle-time", dict(tags), sensors.throttle_time.measure(now_ms)))
        return out

    def sensor_count(self) -> int:
        return len(self._sensors)

    def sensor_bounds(self) -> list[tuple[dict[str, str], float | None]]:
        """``(metric tags, limit)`` of each live quota sensor: the limits in force right now."""
        return [(dict(s.metric_tags), s.quota_sensor.bound) for s in self._sensors.values()]

    def recorded_total(self, metric_tags: dict[str, str], now_ms: int) -> float | None:
        """The sum the quota's live samples hold (the rate times its window), for the sensor with
        these tags; ``None`` when there is none. Read from the ``Rate`` under either algorithm."""
        for sensors in self._sensors.values():
            if sensors.metric_tags == metric_tags:
                sensor = sensors.quota_sensor
                rate = sensor.observed if sensor.observed is not None else sensor.stat
                return rate.total(now_ms) if isinstance(rate, Rate) else None
        return None


class ClientRequestQuotaManager(ClientQuotaManager):
    """``request_percentage`` quotas: thread time as a percentage of one thread (KIP-124).

    A request's thread time ``t`` ns is recorded as ``t * 100 / 1e9`` percent-seconds, so the rate is
    a percentage (100 = one thread fully busy). The throttle is capped at one window
    (``quota.window.size.seconds``). Exempt requests (inter-broker, cluster actions) are the shell's
    to skip.
    """

    quota_metric_name = "request-time"

    def __init__(
        self,
        callback: ClientQuotaCallback | None = None,
        metric_config: MetricConfig = MetricConfig(),
        **kwargs: object,
    ) -> None:
        super().__init__(QuotaType.REQUEST, callback, metric_config, **kwargs)  # type: ignore[arg-type]
        self.max_throttle_time_ms = metric_config.window_ms

    def reconfigure(self, metric_config: MetricConfig) -> None:
        super().reconfigure(metric_config)
        self.max_throttle_time_ms = metric_config.window_ms

    @staticmethod
    def nanos_to_percentage(nanos: float) -> float:
        return nanos * NANOS_TO_PERCENTAGE_PER_SECOND

    def record_request_time_and_get_throttle_time_ms(
        self, principal: str, client_id: str, thread_time_ns: int, now_ms: int
    ) -> int:
        return self.record_and_get_throttle_time_ms(
            principal, client_id, thread_time_ns * NANOS_TO_PERCENTAGE_PER_SECOND, now_ms
        )

    def record_network_thread_time(self, principal: str, client_id: str, thread_time_ns: int, now_ms: int) -> None:
        """Time spent sending the response counts too, unchecked, once it is known."""
        self.record_no_throttle(principal, client_id, thread_time_ns * NANOS_TO_PERCENTAGE_PER_SECOND, now_ms)

    def _throttle_time_ms(self, violation: QuotaViolation) -> int:
        return min(violation.throttle_time_ms, self.max_throttle_time_ms)


class ControllerMutationQuota:
    """One request's view of its client's controller-mutation quota (Kafka's
    ``ControllerMutationQuota``), made by ``ControllerMutationQuotaManager.new_quota_for`` and
    dropped with the request.

    A handler calls ``record(partitions, now_ms)`` for each topic it is about to create, delete or
    grow, after the topic's other checks passed; False means "refuse this topic with
    THROTTLING_QUOTA_EXCEEDED, nothing was recorded" (strict quotas only). ``throttle_time_ms(now_ms)``
    is the response's throttle time: the last violation's, less the time since it was seen (Kafka
    subtracts it too, as a request may wait in the purgatory after recording).
    """

    __slots__ = ("_sensor", "strict", "_last_throttle_ms", "_last_recorded_ms")

    def __init__(self, sensor: Sensor | None, strict: bool) -> None:
        self._sensor = sensor  # None: quotas are off (Kafka's UnboundedControllerMutationQuota)
        self.strict = strict
        self._last_throttle_ms = 0
        self._last_recorded_ms = 0

    @property
    def bounded(self) -> bool:
        """False while controller-mutation quotas are off: recording is a no-op."""
        return self._sensor is not None

    @property
    def is_exceeded(self) -> bool:
        """Strict only: a mutation of this request was refused."""
        return self.strict and self._last_throttle_ms > 0

    def record(self, permits: float, now_ms: int) -> bool:
        """Charge ``permits`` mutations (partitions); whether they are admitted.

        Strict (StrictControllerMutationQuota): refused while the bucket is below zero, else recorded
        whatever their number, so one topic may take the bucket from any balance >= 0 into debt and
        the topics after it are refused. Permissive: always recorded, and a bucket left below zero
        sets the throttle time.
        """
        sensor = self._sensor
        if sensor is None:
            return True
        if self.strict:
            violation = sensor.check_quota(now_ms)
            if violation is not None:
                self._note(violation, now_ms)
                return False
            sensor.record(permits, now_ms, check_quota=False)
            return True
        violation = sensor.record(permits, now_ms)
        if violation is not None:
            self._note(violation, now_ms)
        return True

    def _note(self, violation: QuotaViolation, now_ms: int) -> None:
        self._last_throttle_ms = violation.throttle_time_ms
        self._last_recorded_ms = now_ms

    def throttle_time_ms(self, now_ms: int) -> int:
        return max(0, self._last_throttle_ms - (now_ms - self._last_recorded_ms))


UNBOUNDED_CONTROLLER_MUTATION_QUOTA: Final = ControllerMutationQuota(None, strict=False)


class ControllerMutationQuotaManager(ClientQuotaManager):
    """``controller_mutation_rate`` (KIP-599): partitions created or deleted per second, enforced by a
    ``TokenBucket`` (burst ``quota.window.num * quota.window.size.seconds * rate``) whatever
    ``quota.algorithm`` says, with a ``Rate`` of the same mutations beside it for the
    ``mutation-rate`` metric (Kafka's ``ControllerMutationQuotaManager``).

    Handlers take a per-request ``ControllerMutationQuota`` from ``new_quota_for``: strict for
    CreateTopics v6+, DeleteTopics v5+ and CreatePartitions v3+ (over the quota a topic is refused
    with THROTTLING_QUOTA_EXCEEDED), permissive for older versions (accepted, then throttled).
    ``record_and_get_throttle_time_ms`` is Kafka's manager-level strict check: 0 and recorded, or
    the throttle time and nothing recorded.
    """

    quota_metric_name = "mutation-rate"

    def __init__(
        self,
        callback: ClientQuotaCallback | None = None,
        metric_config: MetricConfig = MetricConfig(),
        **kwargs: object,
    ) -> None:
        kwargs["algorithm"] = TOKEN_BUCKET  # always, whatever quota.algorithm says
        super().__init__(QuotaType.CONTROLLER_MUTATION, callback, metric_config, **kwargs)  # type: ignore[arg-type]

    def _new_quota_sensor(self, bound: float | None, now_ms: int) -> Sensor:
        return Sensor(TokenBucket(self.metric_config), bound, now_ms, observed=Rate(self.metric_config))

    def new_quota_for(self, principal: str, client_id: str, strict: bool, now_ms: int) -> ControllerMutationQuota:
        """The quota one request charges (Kafka ``newQuotaFor``); unbounded while quotas are off."""
        if not self.quotas_enabled:
            return UNBOUNDED_CONTROLLER_MUTATION_QUOTA
        return ControllerMutationQuota(self._sensors_for(principal, client_id, now_ms).quota_sensor, strict)

    def record_and_get_throttle_time_ms(self, principal: str, client_id: str, value: float, now_ms: int) -> int:
        quota = self.new_quota_for(principal, client_id, True, now_ms)
        return 0 if quota.record(value, now_ms) else quota.throttle_time_ms(now_ms)

    def record_permissive_and_get_throttle_time_ms(
        self, principal: str, client_id: str, value: float, now_ms: int
    ) -> int:
        quota = self.new_quota_for(principal, client_id, False, now_ms)
        quota.record(value, now_ms)
        return quota.throttle_time_ms(now_ms)
