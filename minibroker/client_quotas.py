"""The broker's client quotas: the managers, where their configuration lives, and the throttle rules.

The quota arithmetic is in `quotas/` (pure, `now_ms` as an argument); this module gives it a home in
the broker: the Produce, Fetch and Request managers sharing one callback (Kafka's default, or
`client.quota.callback.class`), the producer-id quota (KIP-936), and the QuotaConfigStore, which
follows the client quotas of the cluster's metadata log (ClientQuotaRecords): read into the managers
at start and on every change published, whichever broker took the AlterClientQuotas. The limits
are enforced by each broker on its own traffic, as Kafka's are. `Broker.handle_frame` asks it for throttle times; the connection loop in
`server.py` sends the response at once and mutes the connection for them (every version).

Kafka facts followed (core/.../server/KafkaApis.scala, RequestHandlerHelper.scala,
clients/.../requests/*Response.java `shouldClientThrottle`):

- Produce: appended anyway; byte-rate throttle on the request's size and request-time throttle
  (none for acks=0), the larger wins. acks=0 has no response but its connection is still muted.
- Fetch: the response size is recorded; if either quota throttles, the recording is taken back and
  the answer is an empty response carrying the throttle time. The fetch size is capped at
  quota * (samples - 1) * window.
- Request time (KIP-124): the CPU the broker thread spends on the request, measured per connection
  task by the TaskClock (thread CPU time, so waits in the purgatory or on sockets cost nothing):
  reading and decoding it and running its handler, recorded and checked when the throttle is
  computed (Kafka's request-handler time), then encoding and sending the response, recorded
  unchecked once it is sent (Kafka's network-thread time, `recordNoThrottle`). For every request
  except those of the SASL exchange before authentication (Kafka's authenticator answers them
  outside KafkaApis) and acks=0 produces (Kafka skips their request quota). ApiVersions on an
  authenticated connection is throttled as in Kafka (KafkaApis.handleApiVersionsRequest uses
  sendResponseMaybeThrottle).
- KIP-219: the response goes out at once with its throttle time, and the broker mutes the
  connection (reads nothing more from it) for that long, whatever the version: Kafka 4.4 answers a
  throttled Metadata v4 at once too (the conformance corpus's quotas/request-time). From the
  version each handler registers (`client_throttles_from`, where Kafka's response overrides
  shouldClientThrottle; else from its first version with a throttle time, Kafka 4.4's default) the client
  also waits by itself; an older client's next request simply waits in the muted connection.
- Which byte-rate quota an API is charged to is registered with its handler too
  (minibroker.handlers.ByteRate): Produce's request size, Fetch's response size.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import trio

from minibroker.protocol.errors import ErrorCode
from minibroker.quotas.callback import (
    DEFAULT,
    ClientQuotaCallback,
    ClientQuotaEntity,
    DefaultQuotaCallback,
    QuotaType,
    load_callback,
)
from minibroker.quotas.client_quota import (
    ClientQuotaManager,
    ClientRequestQuotaManager,
    ControllerMutationQuota,
    ControllerMutationQuotaManager,
)
from minibroker.quotas.config import QuotaConfigStore
from minibroker.quotas.connection_quota import ConnectionRateQuotas
from minibroker.quotas.producer_id_quota import ProducerIdQuotaManager
from minibroker.quotas.rate import MetricConfig
from minibroker.storage.errors import storage_error_message
from minibroker.storage.metadata_image import ClientQuotaRecord, MetadataRecord

if TYPE_CHECKING:
    from minibroker.metadata import BrokerMetadata
    from minibroker.clock import BrokerClock
    from minibroker.config import BrokerConfig
    from minibroker.quotas.cluster import Cluster

log = logging.getLogger(__name__)

QUOTA_STORE_FILE = "client-quotas.json"  # where an earlier version kept them (read_legacy_file)


def read_legacy_file(data_dir: Path) -> list[MetadataRecord] | None:
    """The records of an earlier version's `client-quotas.json` (None: no file); ValueError naming
    the file when it cannot be read."""
    path = Path(data_dir) / QUOTA_STORE_FILE
    if not path.exists():
        return None
    try:
        store = QuotaConfigStore.from_json(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    return [ClientQuotaRecord(entity.entries, key, value) for entity, quotas in store.entities()
            for key, value in sorted(quotas.items())]

class TaskClock(trio.abc.Instrument):
    """The thread CPU time each watched task has cost, scheduler overhead included.

    After every task step (of any task) the broker thread's CPU clock is read; the CPU spent since
    the previous step ended is charged to the task that just stepped when it is watched, so a
    connection task pays for its own steps AND for the run loop's work that led to them (the I/O
    poll that woke it, the scheduling). Waiting costs nothing: a thread blocked in its I/O poll or a
    task asleep in the purgatory uses no CPU. What unwatched tasks (housekeeping, the group
    coordinator) cost is charged to nobody.

    Installed with `trio.lowlevel.add_instrument` once a request quota is in use: one CPU clock read
    (~0.2 us) per task step.
    """

    def __init__(self) -> None:
        self._cpu_ns: dict[Any, int] = {}
        self._mark = time.thread_time_ns()

    def restart(self) -> None:
        """Forget the CPU spent before now (call when the instrument is installed)."""
        self._mark = time.thread_time_ns()

    def watch(self, task: Any) -> None:
        self._cpu_ns.setdefault(task, 0)

    def __len__(self) -> int:
        return len(self._cpu_ns)

    def forget(self, task: Any) -> None:
        self._cpu_ns.pop(task, None)

    def cpu_ns(self, task: Any) -> int:
        """CPU charged to `task` so far, its current step up to now included (call it from `task`)."""
        return self._cpu_ns.get(task, 0) + time.thread_time_ns() - self._mark

    def after_task_step(self, task: Any) -> None:
        now = time.thread_time_ns()
        if task in self._cpu_ns:
            self._cpu_ns[task] += now - self._mark
        self._mark = now


def _producer_id_quota(config: BrokerConfig) -> ProducerIdQuotaManager:
    """The KIP-936 manager from the producer.id.quota.* settings, with errors naming the key."""
    from minibroker.config import ConfigError

    if "producer.id.quota.window.num" in config.props:
        log.warning("producer.id.quota.window.num has no effect: the producer-id quota window is one "
                    "producer.id.quota.window.size.seconds, in producer.id.quota.cache.layer.count layers")
    try:
        return ProducerIdQuotaManager(
            window_size_seconds=config["producer.id.quota.window.size.seconds"],
            layer_count=config["producer.id.quota.cache.layer.count"],
            false_positive_rate=config["producer.id.quota.cache.false.positive.rate"],
        )
    except ValueError as exc:
        raise ConfigError("producer.id.quota.cache.layer.count", str(exc)) from None


class BrokerQuotas:
    """Quota managers, their callback and configuration store, for one broker."""

    def __init__(self, config: BrokerConfig, metadata: BrokerMetadata | None, clock: BrokerClock) -> None:
        """`clock`: the broker's; the byte-rate and request managers run on its monotonic reading,
        the producer-id quota on its wall-clock reading (like the audit stream that replays it)."""
        self.clock = clock
        metric_config = MetricConfig(config["quota.window.num"], config["quota.window.size.seconds"] * 1000)
        callback_class = config["client.quota.callback.class"]
        if callback_class:
            from minibroker.config import ConfigError

            try:
                self.callback = load_callback(callback_class)
                self.callback.configure(config.effective_props())
            except ValueError as exc:
                raise ConfigError("client.quota.callback.class", str(exc)) from None
        else:
            self.callback = DefaultQuotaCallback()
        algorithm = config["quota.algorithm"]
        self.produce = ClientQuotaManager(QuotaType.PRODUCE, self.callback, metric_config, algorithm=algorithm)
        self.fetch = ClientQuotaManager(QuotaType.FETCH, self.callback, metric_config, algorithm=algorithm)
        self.request = ClientRequestQuotaManager(self.callback, metric_config, algorithm=algorithm)
        # KIP-599: always a token bucket; charged by the CreateTopics/CreatePartitions/DeleteTopics
        # handlers themselves (`mutation_quota`), not by handle_frame.
        self.controller_mutation = ControllerMutationQuotaManager(self.callback, metric_config)
        self.managers = (self.produce, self.fetch, self.request, self.controller_mutation)
        # KIP-612, applied by the accept loops (minibroker.server); per-IP rates come from the store.
        self.connection_rates = ConnectionRateQuotas(
            metric_config,
            broker_rate=config["max.connection.creation.rate"],
            listener_rates={entry.name: config.listener_value(entry.name, "max.connection.creation.rate")
                            for entry in config["listeners"]},
        )
        listener_names = {entry.name.lower() for entry in config["listeners"]}
        for listener, key in config.listener_overrides():
            if listener not in listener_names:
                log.warning("listener.name.%s.%s has no effect: there is no listener %s", listener, key, listener)
        self.pid = _producer_id_quota(config)
        self.pid_cleanup_interval_s = config["producer.id.quota.cache.cleanup.scheduler.interval.ms"] / 1000
        self.task_clock = TaskClock()
        self._clock_installed = False
        self.metadata = metadata
        self.store = QuotaConfigStore()
        if metadata is not None:
            for pairs, quotas in metadata.image.client_quotas.entities.items():
                entity = ClientQuotaEntity.from_pairs(pairs)
                for key, value in quotas.items():
                    self.store.set(entity, key, value)
            self.store.replay(self._apply)
            if len(self.store):
                log.info("%d client quota entit%s from the metadata log", len(self.store),
                         "y" if len(self.store) == 1 else "ies")
            metadata.subscribe(self._on_metadata)
        self.store.on_change = self._apply

    def _on_metadata(self, records) -> None:
        for record in records:
            if isinstance(record, ClientQuotaRecord):
                self.store.set(ClientQuotaEntity.from_pairs(record.entity), record.key,
                               None if record.remove else record.value)

    # ---- configuration ---------------------------------------------------------------------------

    def _apply(self, entity: ClientQuotaEntity, key: str, value: float | None) -> None:
        """Route one configured value to the manager of its type (on load and on each change)."""
        if key == "producer_ids_rate":
            user = entity.user
            self.pid.update_quota(None if user is DEFAULT else user, value)
            return
        ip = entity.ip
        if ip is not None:  # connection_creation_rate, the only key an ip entity takes (KIP-612)
            self.connection_rates.set_ip_rate(None if ip is DEFAULT else ip,
                                              None if value is None else int(value))
            return
        for manager in self.managers:
            if manager.apply_config_change(entity, key, value):
                return

    def alter(self, entries, validate_only: bool) -> list:
        """AlterClientQuotas: validate, then commit the changes to the metadata log (on every broker
        they are applied as published). A metadata log that cannot be written (disk full,
        read-only) changes nothing: every valid entry is answered KAFKA_STORAGE_ERROR and the
        client may retry."""
        planned, changes = self.store.plan(entries)
        if validate_only or not changes:
            return planned
        if self.metadata is None:
            for entity, key, value in changes:
                self.store.set(entity, key, value)
            return planned
        records = [ClientQuotaRecord(entity.entries, key, 0.0 if value is None else value, value is None)
                   for entity, key, value in changes]
        try:
            self.metadata.commit(records)
        except OSError as exc:
            message = storage_error_message(exc)
            log.error("AlterClientQuotas: %s", message)
            return [(entity, ErrorCode.kafka_storage_error, message) if code == ErrorCode.none
                    else (entity, code, error) for entity, code, error in planned]
        return planned

    def reconfigure_window(self, window_num: int, window_size_seconds: int) -> None:
        """quota.window.num / quota.window.size.seconds changed at runtime (a dynamic broker config):
        the managers measure in the new window from now on."""
        metric_config = MetricConfig(window_num, window_size_seconds * 1000)
        for manager in self.managers:
            manager.reconfigure(metric_config)
        self.connection_rates.reconfigure(metric_config)

    # ---- the request path --------------------------------------------------------------------------

    @property
    def any_enabled(self) -> bool:
        """False until a client quota of some type exists (or a custom callback is configured): the
        request path then skips the quota work entirely, as Kafka's managers record nothing."""
        return self.produce.quotas_enabled or self.fetch.quotas_enabled or self.request.quotas_enabled

    def watch_current_task(self) -> Any:
        """Start timing the running task (installing the TaskClock on first use); returns it."""
        if not self._clock_installed:
            self.task_clock.restart()
            trio.lowlevel.add_instrument(self.task_clock)
            self._clock_installed = True
        task = trio.lowlevel.current_task()
        self.task_clock.watch(task)
        return task

    # KIP-124 charges a request the time of the request handler thread (checked: it may throttle)
    # plus the network thread's time for reading the request and sending the response (recorded
    # unchecked once the response is sent; the next request pays for it). Here one task does both
    # for its connection, and everything that task costs is charged to its requests: from the end
    # of one response's send (`end_request_cycle`) to the moment the next request's throttle is
    # computed (`charge_request_time`) is that request's checked part (the wake-up after a throttle
    # or an idle wait, reading, decoding, handling), and from there to the end of its own send its
    # unchecked part (encoding, sending). Requests exempt from quotas (the SASL exchange, acks=0)
    # are charged nothing, and neither is anyone for them.

    def start_request_cycle(self, conn: Any) -> None:
        """At the top of a connection's loop: make sure its task's CPU is marked, when a request
        quota is in use (the mark normally carries over from the previous response's send)."""
        conn.request_charge = None
        if not self.request.quotas_enabled:
            conn.request_cpu_mark = None
        elif conn.request_cpu_mark is None:
            conn.request_cpu_mark = self.task_clock.cpu_ns(self.watch_current_task())

    def mark_request_start(self, conn: Any) -> None:
        """Before a handler runs: make sure there is a CPU mark (the request quota may have appeared
        while this request was read)."""
        if conn.request_cpu_mark is None:
            conn.request_cpu_mark = self.task_clock.cpu_ns(self.watch_current_task())

    def charge_request_time(self, conn: Any, user: str, client_id: str, now_ms: int) -> int:
        """Record the CPU since the mark against (user, client id)'s request quota; the throttle (ms)."""
        cpu_ns = self.task_clock.cpu_ns(trio.lowlevel.current_task())
        used_ns = cpu_ns - conn.request_cpu_mark
        conn.request_cpu_mark = cpu_ns
        conn.request_charge = (user, client_id)
        return self.request.record_request_time_and_get_throttle_time_ms(user, client_id, used_ns, now_ms)

    def end_request_cycle(self, conn: Any) -> None:
        """Once the response is sent: the CPU since the charge, recorded unchecked (nothing for an
        exempt request); the mark moves to now."""
        mark = conn.request_cpu_mark
        if mark is None:
            return
        cpu_ns = self.task_clock.cpu_ns(trio.lowlevel.current_task())
        charge = conn.request_charge
        if charge is not None:
            self.request.record_network_thread_time(charge[0], charge[1], cpu_ns - mark,
                                                   self.clock.monotonic_ms())
            conn.request_charge = None
        conn.request_cpu_mark = cpu_ns

    def forget_current_task(self) -> None:
        if len(self.task_clock):
            self.task_clock.forget(trio.lowlevel.current_task())

    def update_cluster_metadata(self, cluster_view: Callable[[], Cluster]) -> bool:
        """Pass the cluster to the callback (KIP-257); when it answers True, every live sensor's limit
        is re-read (Kafka: `updateQuotaMetricConfigs()` on each manager). `cluster_view` is only
        called for a callback that overrides `update_cluster_metadata` (the default ignores it, as
        in Kafka), so an unquota'd broker never builds the view. Returns the callback's answer."""
        if type(self.callback).update_cluster_metadata is ClientQuotaCallback.update_cluster_metadata:
            return False
        changed = bool(self.callback.update_cluster_metadata(cluster_view()))
        if changed:
            for manager in self.managers:
                manager.refresh_quota_bounds()
        return changed

    def mutation_quota(self, ctx: Any, strict_since: int) -> ControllerMutationQuota:
        """The controller-mutation quota (KIP-599) one CreateTopics / CreatePartitions / DeleteTopics
        request charges: strict from `strict_since` (THROTTLING_QUOTA_EXCEEDED per topic over the
        quota), permissive below it (accepted, then throttled). Kafka's newQuotaFor."""
        return self.controller_mutation.new_quota_for(ctx.connection.quota_user, ctx.client_id,
                                                      ctx.version >= strict_since, self.clock.monotonic_ms())

    def mutation_throttle_ms(self, ctx: Any, quota: ControllerMutationQuota) -> int:
        """The throttle a request's mutations earned (the response's throttle_time_ms; the connection
        is muted for it as for the other quotas); fed to the ControllerMutation throttle-time metric."""
        now_ms = self.clock.monotonic_ms()
        throttle_ms = quota.throttle_time_ms(now_ms)
        if throttle_ms:
            self.controller_mutation.record_throttle_time(ctx.connection.quota_user, ctx.client_id,
                                                          throttle_ms, now_ms)
        return throttle_ms

    def fetch_max_bytes(self, user: str, client_id: str) -> float:
        """The most one Fetch may return: quota * (samples - 1) * window (inf when unlimited)."""
        return self.fetch.max_value_in_quota_window(user, client_id)

    # ---- housekeeping --------------------------------------------------------------------------------

    def expire(self, now_ms: int, wall_ms: int) -> None:
        for manager in self.managers:
            manager.expire_sensors(now_ms)
        self.connection_rates.expire_sensors(now_ms)
        # The producer-id quota runs on the wall clock, like the audit stream that replays it.
        self.pid.cleanup(wall_ms)

    async def run_pid_cache_cleanup(self) -> None:
        """Drop expired producer-id quota layers and idle users (KIP-936's cleanup scheduler).

        The KIP's scheduler looks every `producer.id.quota.cache.cleanup.scheduler.interval.ms`
        (10 ms); this one drops the same things as soon, but wakes only when there is something to
        drop: at the manager's `next_cleanup_ms`, no sooner than one interval after its last pass
        (so a flood of new users costs at most one pass per interval), and not at all while no user
        is tracked. Waking every 10 ms to find nothing cost an idle broker 1% of a core, and 5% of
        the broker's CPU per record under bench_load (docs/benchmarks.md)."""
        def on_change() -> None:
            changed.set()

        self.pid.on_change = on_change
        try:
            while True:
                changed = trio.Event()
                due_ms = self.pid.next_cleanup_ms()
                wait_s = math.inf if due_ms is None else (due_ms - self.clock.now_ms()) / 1000
                if wait_s > 0:
                    with self.clock.move_on_after(wait_s):
                        await changed.wait()
                self.pid.cleanup(self.clock.now_ms())
                await self.clock.sleep(self.pid_cleanup_interval_s)
        finally:
            self.pid.on_change = None

    async def run_housekeeping(self, every_s: float = 60.0) -> None:
        """Drop idle sensors (an hour idle, as Kafka) and expired producer-id layers, now and then."""
        while True:
            await self.clock.sleep(every_s)
            self.expire(self.clock.monotonic_ms(), self.clock.now_ms())

    def close(self) -> None:
        if self._clock_installed:
            self._clock_installed = False
            try:
                trio.lowlevel.remove_instrument(self.task_clock)
            except (KeyError, RuntimeError):  # outside trio, or the run is already over
                pass
        self.callback.close()
