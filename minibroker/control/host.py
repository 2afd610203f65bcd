"""What the control endpoint (minibroker.control.http) drives:

- `RuntimeTarget`: the brokers of a cluster runtime (minibroker.cluster_runtime, several brokers in
  one process), whose stop, start, move_leader, shuffle_leaders, move_coordinator and advance
  the cluster verbs call (the signatures are in tools' control-interface note and docs/control.md);
- `SingleBrokerHost`: one broker (`minibroker serve --control-listen`), which it can stop and start
  again on the same port; it has no leader or coordinator to move, so those verbs answer 501.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

import trio

from minibroker.config import BrokerConfig
from minibroker.control.http import NotInThisProcess
from minibroker.control.rules import ControlError

log = logging.getLogger(__name__)


def _endpoint(node_id: int, broker: Any | None, address: tuple[str, int] | None) -> dict[str, Any]:
    host, port = address if address is not None else ("", -1)
    return {"node_id": node_id, "host": host, "port": port, "running": broker is not None}


class BrokersTarget:
    """Brokers given by a function ({node id: Broker}); no stop, start or moves."""

    def __init__(self, brokers: Any) -> None:
        self._brokers = brokers

    def brokers(self) -> dict[int, Any]:
        return dict(self._brokers())

    def endpoints(self) -> list[dict[str, Any]]:
        return [_endpoint(n, b, (b.advertised_host, b.advertised_port)) for n, b in sorted(self.brokers().items())]

    def _check(self, verb: str, node_id: int) -> None:
        if node_id not in self.brokers():
            raise ControlError(f"{verb}: no broker {node_id} (brokers: {sorted(self.brokers())})")

    async def stop(self, node_id: int, kill: bool) -> None:
        self._check("stop", node_id)
        raise NotInThisProcess(f"stop {node_id}: this process cannot stop its broker (use a cluster or "
                               "minibroker serve --control-listen)")

    async def start(self, node_id: int) -> None:
        raise NotInThisProcess(f"start {node_id}: this process cannot start brokers")

    async def move_leader(self, topic: str, partition: int, broker: int) -> None:
        raise NotInThisProcess(f"move-leader {topic} {partition} {broker}: one broker leads every partition "
                               "(running_cluster / minibroker serve --brokers N have leaders to move)")

    async def shuffle_leaders(self) -> None:
        raise NotInThisProcess("shuffle-leaders: one broker leads every partition (running_cluster / "
                               "minibroker serve --brokers N have leaders to move)")

    async def move_coordinator(self, broker: int, group: str | None, transactional_id: str | None) -> None:
        what = f"--group {group}" if group is not None else f"--transactional-id {transactional_id}"
        raise NotInThisProcess(f"move-coordinator {what} {broker}: one broker coordinates everything "
                               "(running_cluster / minibroker serve --brokers N have coordinators to move)")

    def advance(self, seconds: float) -> None:
        for broker in self.brokers().values():
            broker.clock.advance(seconds)


async def _call(obj: Any, name: str, verb: str, *args: Any, **kwargs: Any) -> Any:
    """`obj.name(*args, **kwargs)`, awaited when it is a coroutine; the cluster's refusals
    (ValueError, KeyError: a broker not a replica, stopped, unknown) become ControlErrors naming
    the verb."""
    method = getattr(obj, name, None)
    if method is None:
        raise NotInThisProcess(f"{verb}: the cluster in this process does not provide {name}() yet")
    try:
        result = method(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
    except (ValueError, KeyError) as exc:
        raise ControlError(f"{verb}: {str(exc).strip(chr(39))}") from None
    return result


class RuntimeTarget(BrokersTarget):
    """The brokers of a cluster runtime; the cluster verbs are its methods."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        super().__init__(self._running)

    def _running(self) -> dict[int, Any]:
        found = {}
        for node_id in sorted(self.runtime.slots):
            broker = self.runtime.broker(node_id)
            if broker is not None:
                found[node_id] = broker
        return found

    def endpoints(self) -> list[dict[str, Any]]:
        brokers = getattr(self.runtime, "brokers", None)
        if brokers is not None:  # the runtime's own description: node id, host, port, rack, state
            return [{**b, "running": b.get("state", "running") == "running"} for b in brokers()]
        out = []
        for node_id in sorted(self.runtime.slots):
            endpoints = self.runtime.endpoints.get(node_id)
            out.append(_endpoint(node_id, self.runtime.broker(node_id), endpoints.default if endpoints else None))
        return out

    def _known(self, verb: str, node_id: int) -> None:
        if node_id not in self.runtime.slots:
            raise ControlError(f"{verb}: no broker {node_id} (brokers: {sorted(self.runtime.slots)})")

    async def stop(self, node_id: int, kill: bool) -> None:
        self._known("stop", node_id)
        await _call(self.runtime, "stop", f"stop {node_id}", node_id, kill)

    async def start(self, node_id: int) -> None:
        self._known("start", node_id)
        await _call(self.runtime, "start", f"start {node_id}", node_id)

    async def move_leader(self, topic: str, partition: int, broker: int) -> None:
        self._known("move-leader", broker)
        await _call(self.runtime, "move_leader", f"move-leader {topic} {partition} {broker}", topic, partition, broker)

    async def shuffle_leaders(self) -> None:
        await _call(self.runtime, "shuffle_leaders", "shuffle-leaders")

    async def move_coordinator(self, broker: int, group: str | None, transactional_id: str | None) -> None:
        self._known("move-coordinator", broker)
        await _call(self.runtime, "move_coordinator", "move-coordinator", group=group,
                    transactional_id=transactional_id, broker=broker)

    def advance(self, seconds: float) -> None:
        advance = getattr(self.runtime, "advance", None)
        if advance is not None:
            advance(seconds)
        else:
            super().advance(seconds)


class SingleBrokerHost(BrokersTarget):
    """One broker that the endpoint can stop and start again on the same ports (`run` serves it)."""

    def __init__(self, config: BrokerConfig, serve: Any) -> None:
        self.config = config
        self._serve = serve  # minibroker.server.serve (given: the server imports this module)
        self.broker: Any | None = None
        self.node_id: int = config["node.id"]
        self._address: tuple[str, int] | None = None
        self._scope: trio.CancelScope | None = None
        self._stopped = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._listeners: dict[str, tuple[str, int]] = {}
        super().__init__(lambda: {self.node_id: self.broker} if self.broker is not None else {})

    def endpoints(self) -> list[dict[str, Any]]:
        return [_endpoint(self.node_id, self.broker, self._address)]

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; reports (host, port, broker) of the first start."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            result = await nursery.start(self._serve_once, self.config)
            task_status.started(result)
            await trio.sleep_forever()

    async def _serve_once(self, config: BrokerConfig, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope() as scope:
            self._scope = scope
            self._stopped = trio.Event()
            try:
                async with trio.open_nursery() as nursery:
                    host, port, broker = await nursery.start(self._serve, config)
                    self.broker, self._address = broker, (host, port)
                    self._listeners = dict(broker.bound_listeners)
                    task_status.started((host, port, broker))
            finally:
                self.broker = None
                self._stopped.set()

    async def stop(self, node_id: int, kill: bool) -> None:
        if node_id != self.node_id:
            raise ControlError(f"stop: no broker {node_id} (broker: {self.node_id})")
        if kill:
            raise NotInThisProcess(f"stop {node_id} --kill: a single broker stops cleanly only "
                                   "(kill -9 the process, or use a cluster)")
        if self.broker is None or self._scope is None:
            raise ControlError(f"stop: broker {node_id} is not running")
        log.info("stopping broker %d on request", node_id)
        self._scope.cancel()
        await self._stopped.wait()

    async def start(self, node_id: int) -> None:
        if node_id != self.node_id:
            raise ControlError(f"start: no broker {node_id} (broker: {self.node_id})")
        if self.broker is not None:
            raise ControlError(f"start: broker {node_id} is running")
        assert self._nursery is not None and self._address is not None
        # The same ports again (bound as port 0 at first: the ones the system gave).
        listeners = ",".join(f"{name}://{host}:{port}" for name, (host, port) in self._listeners.items())
        config = BrokerConfig({**self.config.props, "listeners": listeners})
        await self._nursery.start(self._serve_once, config)
        log.info("broker %d started again on %s", node_id, listeners)
