"""Connection-creation quotas (KIP-612): the decisions Kafka's acceptor takes for a new connection.

Kafka: ``ConnectionQuotas`` in ``core/.../network/SocketServer.scala`` and
``server/.../network/ConnectionQuotaEntity.java``. Pure: every call takes ``now_ms``; the accept loop
in ``minibroker.server`` does the waiting and the closing.

Three rates, each a windowed ``Rate`` of accepted connections per second over ``quota.window.num``
samples of ``quota.window.size.seconds`` (the client quotas' window):

- broker-wide, ``max.connection.creation.rate`` (default 2147483647: unlimited), on every listener
  but the protected one (the inter-broker listener, when there is more than one listener);
- per listener, ``listener.name.<listener>.max.connection.creation.rate`` (default: the broker-wide
  value, as Kafka configures a listener with ``valuesWithPrefixOverride``);
- per IP, ``connection_creation_rate`` on an ``ip`` quota entity (AlterClientQuotas), falling back to
  the default IP entity's value; unset everywhere, no IP is tracked.

For each accepted connection (``record_accept``): the broker and listener rates record it, and when
either goes over its limit the acceptor stops for the larger throttle, capped at one window (Kafka
blocks its acceptor thread holding the accepted socket; connections behind it wait in the listen
backlog); the connection then goes on. Then the IP rate (``record_ip``): over its limit, the
connection is taken back from all three rates and refused: Kafka keeps the socket open, unread, for
the throttle time and then closes it (``ConnectionThrottledException``, ``throttledSockets``).

Throttle time is ``QuotaUtils.boundedThrottleTime``: ``(rate - limit) / limit * window``, the
window being the one the rate was measured over, capped at ``quota.window.size.seconds``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from minibroker.quotas.rate import Avg, MetricConfig, Rate, Sensor

__all__ = [
    "ConnectionRateQuotas",
    "IpThrottle",
    "UNLIMITED_CONNECTION_RATE",
]

# Kafka's default for every connection-creation rate: Int.MaxValue, which means "no quota" for an IP.
UNLIMITED_CONNECTION_RATE: Final = 2**31 - 1

# Kafka ConnectionQuotaEntity.ipQuotaEntity: an IP's sensor expires after an hour without records;
# the broker's and the listeners' never do.
IP_SENSOR_EXPIRATION_MS: Final = 3600 * 1000

# The throttle-time averages use the broker's general metric config, as the client quotas' do.
THROTTLE_TIME_CONFIG: Final = MetricConfig(samples=2, window_ms=30_000)


@dataclass(frozen=True, slots=True)
class IpThrottle:
    """A connection refused for its IP's rate: hold it ``throttle_ms``, then close it."""

    ip: str
    rate: int
    throttle_ms: int


@dataclass(slots=True)
class _ListenerQuota:
    """One listener's rate and its two throttle-time averages (Kafka ListenerConnectionQuota)."""

    sensor: Sensor
    throttle_time: Avg  # connection-accept-throttle-time: broker/listener delays
    ip_throttle_time: Avg  # ip-connection-accept-throttle-time
    delays: int = 0
    ip_refusals: int = 0


class ConnectionRateQuotas:
    """The broker's KIP-612 connection-creation rates: broker-wide, per listener, per IP."""

    def __init__(
        self,
        metric_config: MetricConfig,
        broker_rate: int = UNLIMITED_CONNECTION_RATE,
        listener_rates: dict[str, int] | None = None,
        protected_listener: str | None = None,
    ) -> None:
        """``listener_rates``: every listener's name -> its max.connection.creation.rate (listeners
        not named get ``broker_rate``). ``protected_listener``: Kafka's inter-broker listener, exempt
        from the broker-wide rate while there is more than one listener."""
        self.metric_config = metric_config
        self.broker_rate = broker_rate
        self.protected_listener = protected_listener
        self._broker = Sensor(Rate(metric_config), float(broker_rate), 0)
        self._listener_rates = dict(listener_rates or {})
        self._listeners: dict[str, _ListenerQuota] = {}
        for name in self._listener_rates:
            self._listener(name)
        self._default_ip_rate = UNLIMITED_CONNECTION_RATE
        self._ip_rates: dict[str, int] = {}
        self._ip_sensors: dict[str, Sensor] = {}

    # ---- configuration -------------------------------------------------------------------------

    @property
    def max_throttle_ms(self) -> int:
        return self.metric_config.window_ms

    def listener_rate(self, listener: str) -> int:
        return self._listener_rates.get(listener, self.broker_rate)

    def _listener(self, name: str) -> _ListenerQuota:
        quota = self._listeners.get(name)
        if quota is None:
            quota = _ListenerQuota(
                Sensor(Rate(self.metric_config), float(self.listener_rate(name)), 0),
                Avg(THROTTLE_TIME_CONFIG), Avg(THROTTLE_TIME_CONFIG),
            )
            self._listeners[name] = quota
        return quota

    def set_ip_rate(self, ip: str | None, rate: int | None) -> None:
        """``connection_creation_rate`` set (``rate``) or removed (None) on ``ip``, None being the
        default IP entity. Live IP sensors take the new limit at once (updateIpConnectionRateQuota)."""
        if ip is None:
            self._default_ip_rate = UNLIMITED_CONNECTION_RATE if rate is None else rate
            for address, live in self._ip_sensors.items():
                live.bound = float(self.rate_for_ip(address))
            return
        if rate is None:
            self._ip_rates.pop(ip, None)
        else:
            self._ip_rates[ip] = rate
        sensor = self._ip_sensors.get(ip)
        if sensor is not None:
            sensor.bound = float(self.rate_for_ip(ip))

    def rate_for_ip(self, ip: str) -> int:
        """Kafka's connectionRateForIp: the IP's own value, else the default IP entity's."""
        return self._ip_rates.get(ip, self._default_ip_rate)

    def reconfigure(self, metric_config: MetricConfig) -> None:
        """A new quota window: every rate starts afresh in it (its samples cannot be re-cut)."""
        self.metric_config = metric_config
        self._broker = Sensor(Rate(metric_config), float(self.broker_rate), 0)
        old = self._listeners
        self._listeners = {}
        for name, quota in old.items():
            fresh = self._listener(name)
            fresh.delays, fresh.ip_refusals = quota.delays, quota.ip_refusals
        self._ip_sensors.clear()

    # ---- the accept path -----------------------------------------------------------------------

    def _protected(self, listener: str) -> bool:
        return listener == self.protected_listener and len(self._listeners) > 1

    def _record(self, sensor: Sensor, now_ms: int) -> int:
        violation = sensor.record(1.0, now_ms)
        return 0 if violation is None else min(violation.throttle_time_ms, self.max_throttle_ms)

    def record_accept(self, listener: str, now_ms: int) -> int:
        """Count a connection accepted on ``listener``; how long the acceptor waits before going on
        (recordConnectionAndGetThrottleTimeMs: the larger of the broker's and the listener's
        throttles, the broker's skipped on the protected listener)."""
        quota = self._listener(listener)
        broker_ms = 0 if self._protected(listener) else self._record(self._broker, now_ms)
        throttle_ms = max(broker_ms, self._record(quota.sensor, now_ms))
        if throttle_ms > 0:
            quota.throttle_time.record(throttle_ms, now_ms)
            quota.delays += 1
        return throttle_ms

    def record_ip(self, listener: str, ip: str, now_ms: int) -> IpThrottle | None:
        """Count the connection against its IP's rate (recordIpConnectionMaybeThrottle). Over it,
        the connection is taken back from the IP's, the listener's and the broker's rates and the
        answer says how long to hold it before closing it; None: admitted."""
        rate = self.rate_for_ip(ip)
        if rate == UNLIMITED_CONNECTION_RATE:
            return None
        sensor = self._ip_sensors.get(ip)
        if sensor is None:
            sensor = self._ip_sensors[ip] = Sensor(Rate(self.metric_config), float(rate), now_ms)
        throttle_ms = self._record(sensor, now_ms)
        if throttle_ms == 0:
            return None
        sensor.record(-1.0, now_ms, check_quota=False)
        quota = self._listener(listener)
        if not self._protected(listener):
            self._broker.record(-1.0, now_ms, check_quota=False)
        quota.sensor.record(-1.0, now_ms, check_quota=False)
        quota.ip_throttle_time.record(throttle_ms, now_ms)
        quota.ip_refusals += 1
        return IpThrottle(ip, rate, throttle_ms)

    # ---- housekeeping and metrics --------------------------------------------------------------

    def expire_sensors(self, now_ms: int) -> int:
        """Drop IP sensors idle for an hour (their rate is empty by then); return how many."""
        idle = [ip for ip, s in self._ip_sensors.items() if now_ms - s.last_record_ms > IP_SENSOR_EXPIRATION_MS]
        for ip in idle:
            del self._ip_sensors[ip]
        return len(idle)

    def metrics_snapshot(self, now_ms: int) -> Iterable[tuple[str, dict[str, str], float]]:
        """``(name, tags, value)`` in Kafka's socket-server-metrics names: ``broker-connection-accept-rate``,
        ``connection-accept-rate`` per listener and per live IP, ``connection-accept-throttle-time`` and
        ``ip-connection-accept-throttle-time`` per listener (NaN when none in the last 60 s)."""
        yield "broker-connection-accept-rate", {}, self._broker.measure(now_ms)
        for name, quota in self._listeners.items():
            tags = {"listener": name}
            yield "connection-accept-rate", tags, quota.sensor.measure(now_ms)
            yield "connection-accept-throttle-time", tags, quota.throttle_time.measure(now_ms)
            yield "ip-connection-accept-throttle-time", tags, quota.ip_throttle_time.measure(now_ms)
        for ip, sensor in self._ip_sensors.items():
            yield "connection-accept-rate", {"ip": ip}, sensor.measure(now_ms)

    def totals(self) -> dict[str, tuple[int, int]]:
        """listener -> (times the acceptor waited for a rate, connections refused for their IP's rate)."""
        return {name: (quota.delays, quota.ip_refusals) for name, quota in self._listeners.items()}
