"""Several brokers in one process, one controller, one trio run: the cluster a test starts
(`minibroker.testing.running_cluster`, `minibroker serve --brokers N`), and what a test does to it.

Model: franz-go's kfake `Cluster`, which owns its brokers. Here each broker is a full `Broker` with
its own node id, listeners, data directory, clock and request handling; the cluster owns the
controller (minibroker.storage.controller: the metadata log, kept in the first broker's data
directory, as a combined KRaft node keeps it) and the address book of the brokers, and runs the
controller's own timers:

* broker sessions (Kafka's broker.session.timeout.ms): a running broker heartbeats every
  broker.heartbeat.interval.ms (on its clock); one that has not for broker.session.timeout.ms (on
  the controller's clock) is fenced: its leaderships move to other ISR members, it leaves the ISRs;
* the auto leader rebalance (auto.leader.rebalance.enable, every
  leader.imbalance.check.interval.seconds): partitions go back to their preferred replicas.

A cluster of one broker is what `running_broker` and a plain `minibroker serve` run: its data
directory is the broker's, exactly as before there were clusters.

What a test does (also reachable over HTTP, minibroker.control_http, and from the CLI):

* `stop(node, kill=False)`: a clean stop is Kafka's controlled shutdown (the broker's leaderships
  move first, then it is fenced, then it closes cleanly); `kill=True` is a kill -9 as the cluster
  sees it (nothing moved, nothing closed cleanly: the logs are left for recovery, and the controller
  notices only when the session times out);
* `start(node)`: the broker again, on the same data directory and the same ports; it registers, is
  unfenced, leads again what has no other leader, and catches up from the leaders;
* `advance(seconds)`: every clock, each broker's and the controller's, moves on together
  (minibroker.clock); the brokers that are up count as having heartbeated and their caught-up
  followers as caught up meanwhile, as they would have been.

Every mutation of the metadata (a stop, a leader move) is committed through the controller like any
other change; the brokers follow it as they follow an admin request's.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import trio

from minibroker.broker import Broker, load_or_create_meta, prepare_data_dir
from minibroker.control.rules import ControlPlane
from minibroker.clock import BrokerClock
from minibroker.cluster import BrokerEndpoints
from minibroker.config import BrokerConfig
from minibroker.internal_topics import configure_internal_topics
from minibroker.log_context import broker_log_context
from minibroker.metadata_migration import legacy_importer
from minibroker.storage.controller import Controller
from minibroker.storage.errors import UnknownTopicError
from minibroker.storage.offsets_store import TOPIC as GROUP_TOPIC
from minibroker.storage.share_state import TOPIC as SHARE_STATE_TOPIC
from minibroker.storage.transaction_store import TOPIC as TXN_TOPIC
from minibroker.storage.file_cache import FileCache

__all__ = ["BrokerSlot", "ClusterRuntime", "cluster_configs", "serve_cluster_until_signalled"]

log = logging.getLogger(__name__)


def cluster_configs(base: BrokerConfig, brokers: int, listens: Sequence[str] = ()) -> list[BrokerConfig]:
    """The configs of `brokers` brokers made from one: node ids from base's node.id up, each with a
    data directory `broker-<id>` under base's log.dirs (a cluster of one keeps log.dirs itself), its
    listeners on consecutive ports from base's (port 0 stays 0: each binds its own), or `listens[i]`
    (HOST:PORT) for its PLAINTEXT listener when given."""
    if brokers < 1:
        raise ValueError("a cluster has at least one broker")
    if listens and len(listens) != brokers:
        raise ValueError(f"{len(listens)} listener address(es) for {brokers} broker(s): give one per broker, or one")
    configs = []
    first = base["node.id"]
    for i in range(brokers):
        props = dict(base.props)
        node_id = first + i
        props["node.id"] = str(node_id)
        if brokers > 1:
            props["log.dirs"] = str(Path(base["log.dirs"]) / f"broker-{node_id}")
        listeners = []
        for entry in base["listeners"]:
            port = entry.port + i if entry.port else 0
            if listens and entry.name == "PLAINTEXT":
                host, _, port_text = listens[i].rpartition(":")
                listeners.append(f"{entry.name}://{host}:{port_text}")
            else:
                listeners.append(f"{entry.name}://{entry.host}:{port}")
        props["listeners"] = ",".join(listeners)
        metrics = props.get("metrics.listen")
        if metrics and brokers > 1:  # each broker its own /metrics, on the next ports (0 stays 0)
            host, _, port_text = metrics.rpartition(":")
            port = int(port_text) if port_text.isdigit() else 0
            props["metrics.listen"] = f"{host}:{port + i if port else 0}"
        configs.append(BrokerConfig(props))
    return configs


@dataclass
class BrokerSlot:
    """One broker of the cluster, running or not."""

    node_id: int
    config: BrokerConfig
    clock: BrokerClock
    broker: Broker | None = None
    scope: trio.CancelScope | None = None
    stopped_event: trio.Event | None = None
    state: str = "new"  # new, running, stopped, killed
    last_heartbeat: float = 0.0  # the controller clock's reading at its last heartbeat
    starts: int = 0

    @property
    def data_dir(self) -> Path:
        return Path(self.config["log.dirs"])


class ClusterRuntime:
    """The brokers and the controller of a cluster (module docstring). Its methods run in the
    cluster's trio run."""

    def __init__(self, configs: Sequence[BrokerConfig], *, broker_factory: Callable[..., Broker] = Broker) -> None:
        self.slots: dict[int, BrokerSlot] = {c["node.id"]: BrokerSlot(c["node.id"], c, BrokerClock()) for c in configs}
        if len(self.slots) != len(configs):
            raise ValueError("two brokers with one node.id")
        self.first = min(self.slots)
        self.controller_clock = BrokerClock()
        self.endpoints: dict[int, BrokerEndpoints] = {}
        self.controller: Controller | None = None
        self._broker_factory = broker_factory
        self._nursery: trio.Nursery | None = None
        self._started = time.perf_counter()
        # One set of test controls for every broker of the process, restarts included
        # (minibroker.control): a stack pushed without broker= goes to whichever broker is asked next.
        self.control_plane = ControlPlane(configs[0]["control.capture.requests"])
        self.control_address: tuple[str, int] | None = None

    # -- reading ---------------------------------------------------------------------------------------

    def broker(self, node_id: int) -> Broker | None:
        """The running broker of a node id (None when it is stopped)."""
        slot = self.slots.get(node_id)
        if slot is None or slot.state != "running" or slot.broker is None or slot.broker.stopped:
            return None
        return slot.broker

    def running(self) -> list[Broker]:
        return [b for node in sorted(self.slots) if (b := self.broker(node)) is not None]

    def any_broker(self) -> Broker:
        brokers = self.running()
        if not brokers:
            raise RuntimeError("every broker of the cluster is stopped")
        return brokers[0]

    def bootstrap(self, listener: str = "PLAINTEXT") -> str:
        """host:port,... of the brokers that are up, for clients of `listener`."""
        return ",".join(f"{h}:{p}" for h, p in (b.listeners.get(listener, (None, None)) for b in self.running())
                        if h is not None)

    # -- running ---------------------------------------------------------------------------------------

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Open the controller, start every broker, run the controller's timers; report the
        cluster once every broker listens; close everything when cancelled."""
        first = self.slots[self.first]
        data_dir = first.data_dir
        prepare_data_dir(data_dir)
        if len(self.slots) > 1:
            # One cluster id for every broker: the first one's (meta.properties), given to the others.
            cluster_id = load_or_create_meta(data_dir, self.first, first.config["cluster.id"])
            for slot in self.slots.values():
                slot.config = BrokerConfig({**slot.config.props, "cluster.id": cluster_id})
        with broker_log_context(self.first):
            self.controller = Controller.open(
                data_dir, self.first, self.controller_clock.now_ms(), files=FileCache(16),
                legacy=legacy_importer(data_dir, self.first, first.config.log_config))
        try:
            controller = self.controller
            controller.default_replication_factor = first.config["default.replication.factor"]
            controller.unclean_leader_election = first.config.log_config.unclean_leader_election_enable
            configure_internal_topics(controller, first.config)
            # Every broker is registered before any opens: the internal topics the first one
            # creates are placed over all of them.
            for node_id in sorted(self.slots):
                slot = self.slots[node_id]
                controller.register_broker(node_id, slot.config["broker.rack"], self.controller_clock.now_ms())
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                for node_id in sorted(self.slots):
                    await self.start(node_id)
                nursery.start_soon(self._session_checks)
                nursery.start_soon(self._leader_rebalance)
                log.info("cluster of %d broker(s) ready in %.0f ms: %s", len(self.slots),
                         (time.perf_counter() - self._started) * 1000, self.bootstrap())
                task_status.started(self)
        finally:
            self._nursery = None
            if self.controller is not None:
                self.controller.close(clean=True, now_ms=self.controller_clock.now_ms())

    async def start(self, node_id: int) -> Broker:
        """Start a broker (again): on its data directory and its ports of before."""
        slot = self._slot(node_id)
        if slot.state == "running":
            raise ValueError(f"broker {node_id} is running")
        assert self._nursery is not None and self.controller is not None
        broker = self._broker_factory(slot.config, clock=slot.clock, controller=self.controller, peers=self.endpoints,
                                      peer=self.broker)
        slot.broker = broker
        broker.control.plane = self.control_plane
        try:
            await self._nursery.start(self._serve, slot, broker)
        except BaseException:
            slot.broker = None
            slot.state = "stopped"
            raise
        slot.starts += 1
        # Later starts bind the same ports (a client's bootstrap list stays valid).
        slot.config = _with_ports(slot.config, broker.bound_listeners)
        return broker

    async def _serve(self, slot: BrokerSlot, broker: Broker, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        from minibroker.server import serve

        scope = trio.CancelScope()
        slot.scope = scope
        slot.stopped_event = trio.Event()
        try:
            with scope:
                async with trio.open_nursery() as nursery:
                    await nursery.start(functools.partial(serve, None, broker=broker))
                    slot.state = "running"
                    self.heartbeat(slot.node_id)
                    assert self.controller is not None
                    self.controller.register_broker(slot.node_id, slot.config["broker.rack"],
                                                    self.controller_clock.now_ms())
                    nursery.start_soon(self._heartbeats, slot, broker)
                    task_status.started()
        finally:
            if slot.state == "running":
                slot.state = "stopped"
            slot.stopped_event.set()

    async def stop(self, node_id: int, kill: bool = False) -> None:
        """Stop a broker: cleanly (a controlled shutdown), or as if killed (module docstring)."""
        slot = self._slot(node_id)
        if slot.state != "running" or slot.broker is None or slot.scope is None:
            raise ValueError(f"broker {node_id} is not running")
        assert self.controller is not None
        broker = slot.broker
        if kill:
            broker.killed = True
        else:
            # As a move_leader: the ISR members that take over have every record of this broker's
            # leaderships first, its coordinators' latest writes included (those do not wait for the
            # followers here, as Kafka's wait for the high watermark).
            led = [(t.name, index, reg.isr) for t in self.controller.image.topics.by_name.values()
                   for index, reg in t.partitions.items() if reg.leader == node_id]
            await self._caught_up(led)
            with broker_log_context(node_id):
                self.controller.controlled_shutdown(node_id, self.controller_clock.now_ms())
        broker.stopped = True
        slot.state = "killed" if kill else "stopped"
        slot.scope.cancel()
        assert slot.stopped_event is not None
        await slot.stopped_event.wait()
        log.info("broker %d %s", node_id, "killed" if kill else "stopped")

    def _slot(self, node_id: int) -> BrokerSlot:
        slot = self.slots.get(node_id)
        if slot is None:
            raise ValueError(f"no broker {node_id} in this cluster (brokers {', '.join(map(str, sorted(self.slots)))})")
        return slot

    # -- the controller's timers -----------------------------------------------------------------------

    def heartbeat(self, node_id: int) -> None:
        self.slots[node_id].last_heartbeat = self.controller_clock.monotonic()

    async def _heartbeats(self, slot: BrokerSlot, broker: Broker) -> None:
        every = slot.config["broker.heartbeat.interval.ms"] / 1000
        while True:
            await slot.clock.sleep(every)
            if broker.stopped:
                return
            self.heartbeat(slot.node_id)

    async def _session_checks(self) -> None:
        first = self.slots[self.first].config
        timeout = first["broker.session.timeout.ms"] / 1000
        every = min(first["broker.heartbeat.interval.ms"] / 1000, timeout / 2)
        while True:
            await self.controller_clock.sleep(every)
            self.check_sessions()

    def check_sessions(self) -> list[int]:
        """Fence the registered brokers whose sessions timed out; their node ids."""
        assert self.controller is not None
        timeout = self.slots[self.first].config["broker.session.timeout.ms"] / 1000
        now = self.controller_clock.monotonic()
        fenced = []
        for node_id, registration in list(self.controller.image.cluster.brokers.items()):
            slot = self.slots.get(node_id)
            if registration.fenced or slot is None or slot.state == "new":
                continue
            if now - slot.last_heartbeat > timeout:
                log.info("broker %d: no heartbeat for broker.session.timeout.ms (%d ms): fenced", node_id,
                         timeout * 1000)
                self.controller.fence_broker(node_id, self.controller_clock.now_ms())
                fenced.append(node_id)
        return fenced

    async def _leader_rebalance(self) -> None:
        config = self.slots[self.first].config
        if not config["auto.leader.rebalance.enable"]:
            return
        every = config["leader.imbalance.check.interval.seconds"]
        while True:
            await self.controller_clock.sleep(every)
            assert self.controller is not None
            moved = self.controller.preferred_elections(self.controller_clock.now_ms())
            if moved:
                log.info("auto leader rebalance: %d partition(s) back to their preferred leader", moved)

    # -- leaders and coordinators (a test's controls) -------------------------------------------------

    async def move_leader(self, topic: str, partition: int, broker: int) -> None:
        """Make `broker` the leader of a partition, in a new leader epoch (kfake's
        MoveTopicPartition, librdkafka's partition_set_leader). ValueError when it is not a replica
        in the ISR that is up (anything else could lose acknowledged records); KeyError for a
        partition that does not exist. It waits (up to replica.lag.time.max.ms) until `broker` has
        every record of the leader, as a graceful move does, so that nothing the leader appended is
        cut from it (a coordinator's records included, which do not wait for the ISR)."""
        assert self.controller is not None
        registration = self.controller.image.partition(topic, partition)
        if registration is None:
            raise KeyError(f"No such partition as {topic}-{partition}")
        await self._caught_up([(topic, partition, (broker,))])
        try:
            self.controller.move_leader(topic, partition, broker, self.controller_clock.now_ms())
        except UnknownTopicError as exc:
            raise KeyError(str(exc)) from None

    async def shuffle_leaders(self, topics: Iterable[str] | None = None) -> int:
        """Give every partition with another ISR member up a new leader among them, at random
        (kfake's ShufflePartitionLeaders), once its followers have every record of its leader;
        how many moved."""
        assert self.controller is not None
        names = set(topics) if topics is not None else None
        waits = [(t.name, index, reg.isr) for t in self.controller.image.topics.by_name.values()
                 if names is None or t.name in names for index, reg in t.partitions.items()]
        await self._caught_up(waits)
        return self.controller.shuffle_leaders(self.controller_clock.now_ms(), topics=topics)

    async def _caught_up(self, partitions: Iterable[tuple[str, int, Sequence[int]]]) -> None:
        """Wait until each named replica that is up has its partition's leader's log end (at most
        replica.lag.time.max.ms in all: a replica that does not catch up is moved to anyway, as
        the ISR still holds it)."""
        clock = self.controller_clock
        deadline = clock.monotonic() + self.slots[self.first].config["replica.lag.time.max.ms"] / 1000
        for topic, partition, replicas in partitions:
            while clock.monotonic() < deadline:
                assert self.controller is not None
                registration = self.controller.image.partition(topic, partition)
                leader = self.broker(registration.leader) if registration is not None else None
                leader_log = leader.logs.log(topic, partition) if leader is not None else None
                if leader_log is None:
                    break
                behind = [b for b in replicas if (broker := self.broker(b)) is not None
                          and (plog := broker.logs.log(topic, partition)) is not None
                          and plog.log_end_offset < leader_log.log_end_offset]
                if not behind:
                    break
                await clock.sleep(0.005)

    def coordinator_partition(self, *, group: str | None = None, transactional_id: str | None = None,
                              share_group: str | None = None) -> tuple[str, int]:
        """The partition of __consumer_offsets (a group), __transaction_state (a transactional id)
        or __share_group_state (a share group's share coordinator) whose leader coordinates the
        key, as Kafka picks it (minibroker.cluster; __share_group_state has one partition, so it
        holds every share group's state)."""
        if sum(key is not None for key in (group, transactional_id, share_group)) != 1:
            raise ValueError("name exactly one of group, transactional_id or share_group")
        broker = self.any_broker()
        if share_group is not None:
            if broker.cluster.partition(SHARE_STATE_TOPIC, 0) is None:
                raise KeyError(f"{SHARE_STATE_TOPIC} does not exist yet (no share group has state): no coordinator to move")
            return SHARE_STATE_TOPIC, 0
        topic, key = (GROUP_TOPIC, group) if group is not None else (TXN_TOPIC, transactional_id)
        partition, count = broker.cluster.coordinator_partition(topic, key or "")
        if count == 0:
            raise KeyError(f"{topic} does not exist yet: no coordinator to move")
        return topic, partition

    async def move_coordinator(self, *, group: str | None = None, transactional_id: str | None = None,
                               share_group: str | None = None, broker: int) -> None:
        """Move the coordinator of a group, a transactional id or a share group's state to `broker`:
        the leader of its partition of __consumer_offsets / __transaction_state /
        __share_group_state moves there (so every key of that partition moves with it, as in
        Kafka)."""
        topic, partition = self.coordinator_partition(group=group, transactional_id=transactional_id,
                                                      share_group=share_group)
        await self.move_leader(topic, partition, broker)

    def brokers(self) -> list[dict[str, Any]]:
        """Every broker of the cluster: node id, PLAINTEXT address, rack, state, whether it hosts the
        controller."""
        found = []
        for node_id in sorted(self.slots):
            slot = self.slots[node_id]
            endpoints = self.endpoints.get(node_id)
            host, port = endpoints.default if endpoints is not None else (None, None)
            found.append({"node_id": node_id, "host": host, "port": port, "rack": slot.config["broker.rack"],
                          "state": slot.state, "controller": node_id == self.first})
        return found

    # -- time ---------------------------------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        """Move every clock on by `seconds` (module docstring)."""
        for slot in self.slots.values():
            slot.clock.advance(seconds)
        self.controller_clock.advance(seconds)
        for slot in self.slots.values():
            if slot.state == "running":
                self.heartbeat(slot.node_id)
                if slot.broker is not None:
                    slot.broker.replication.time_jumped()


def _with_ports(config: BrokerConfig, bound: dict[str, tuple[str, int]]) -> BrokerConfig:
    """`config` with each listener's port 0 replaced by the port it bound."""
    listeners = []
    for entry in config["listeners"]:
        port = bound.get(entry.name, (entry.host, entry.port))[1] if entry.port == 0 else entry.port
        listeners.append(f"{entry.name}://{entry.host}:{port}")
    return BrokerConfig({**config.props, "listeners": ",".join(listeners)})



async def serve_cluster_until_signalled(base: BrokerConfig, brokers: int, listens: Sequence[str] = ()) -> None:
    """`minibroker serve --brokers N`: run the cluster until SIGINT or SIGTERM, then stop every
    broker cleanly. Prints one ready line: the bootstrap.servers of every broker."""
    import signal

    runtime = ClusterRuntime(cluster_configs(base, brokers, listens))
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(runtime.run)
            control = ""
            if base["control.listen"] is not None:  # the HTTP control endpoint (minibroker.control)
                from minibroker.control.host import RuntimeTarget
                from minibroker.control.http import serve_control

                runtime.control_address = await nursery.start(serve_control, RuntimeTarget(runtime),
                                                              *base["control.listen"])
                control = " control=http://%s:%d/" % runtime.control_address
            print(f"minibroker ready: bootstrap.servers={runtime.bootstrap()} data={base['log.dirs']} "
                  f"brokers={brokers}{control}", flush=True)
            async for signum in signals:
                log.info("received %s, shutting down", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
