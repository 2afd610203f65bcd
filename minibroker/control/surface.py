"""The control surface in Python: methods a test calls on `running_broker` (a cluster of one) and on
a running cluster. Each runs on the brokers' trio thread and returns once done; each is one line:

    broker.errors.push("Produce", ["NOT_LEADER_OR_FOLLOWER"] * 2)   # the next two Produce requests
    broker.errors.push("JoinGroup", 15, group="g1")                  # COORDINATOR_NOT_AVAILABLE once
    broker.errors.clear()
    broker.delay(0, 200)                                             # 200 ms round trip on broker 0
    broker.requests(api="JoinGroup")                                 # captured requests
    broker.hook(lambda r: Answer(error=6), api="Fetch", once=True)   # answer, delay or pass
    broker.close_connections()                                       # clients reconnect
    broker.advance(hours=24)                                         # every broker's clock

A class using it provides `in_broker(fn, *args)` (run on the trio thread) and either a `runtime`
whose `broker(node_id)` and `slots` give the running brokers (the cluster) or a `broker` attribute
(a single Broker). The brokers share one ControlPlane (minibroker.control.rules), joined here.
"""

from __future__ import annotations

from typing import Any, Callable

from minibroker.control.capture import CapturedRequest
from minibroker.control.rules import Answer, ControlError, ControlledRequest, ControlPlane, Delay, ErrorStack, Hook

__all__ = ["Answer", "ControlError", "ControlSurface", "ControlledRequest", "Delay", "Errors", "Hook",
           "control_brokers", "shared_plane"]


def control_brokers(target: Any) -> dict[int, Any]:
    """{node id: Broker} of the running brokers of `target` (a running cluster or broker)."""
    runtime = getattr(target, "runtime", None)
    if runtime is not None:
        found = {}
        for node_id in sorted(runtime.slots):
            broker = runtime.broker(node_id)
            if broker is not None:
                found[node_id] = broker
        return found
    broker = target.broker
    return {broker.node_id: broker}


def shared_plane(brokers: dict[int, Any], plane: ControlPlane | None = None) -> ControlPlane:
    """One plane for all `brokers` (the given one, else the first broker's), set on each of them."""
    if plane is None:
        if not brokers:
            raise ControlError("no broker is running")
        plane = next(iter(brokers.values())).control.plane
    for broker in brokers.values():
        if broker.control.plane is not plane:
            # a restarted broker keeps its capture limit, takes the shared controls
            plane.requests.set_limit(max(plane.requests.limit, broker.control.plane.requests.limit))
            broker.control.plane = plane
    return plane


class Errors:
    """`errors.push(...)`, `errors.clear()`, `errors.pending()`."""

    def __init__(self, surface: ControlSurface) -> None:
        self._surface = surface

    def push(self, api: str | int, codes: int | str | list[int | str], *, broker: int | None = None,
             topic: str | None = None, partition: int | None = None, group: str | None = None,
             client_id: str | None = None) -> ErrorStack:
        """The next requests of `api` matching the filters are answered with `codes`, one each, in
        order, instead of being handled (0 lets one through). Codes are numbers or Kafka's names."""
        return self._surface._on_plane(lambda plane: plane.push(
            api, codes, broker=broker, topic=topic, partition=partition, group=group, client_id=client_id))

    def clear(self) -> None:
        self._surface._on_plane(lambda plane: plane.clear())

    def pending(self) -> list[dict[str, Any]]:
        """The stacks not yet used up: API, codes left, filters."""
        return self._surface._on_plane(lambda plane: [s.describe() for s in plane.stacks])


class ControlSurface:
    """Mixin: the controls (module docstring)."""

    def in_broker(self, fn: Callable[..., Any], *args: Any) -> Any:  # provided by the class
        raise NotImplementedError

    def _on_plane(self, fn: Callable[[ControlPlane], Any]) -> Any:
        return self.in_broker(lambda: fn(shared_plane(control_brokers(self))))

    @property
    def errors(self) -> Errors:
        return Errors(self)

    def delay(self, broker: int, ms: int) -> None:
        """Hold every request broker `broker` receives `ms` before it is handled (a round trip);
        0 ends it."""
        def apply(plane: ControlPlane) -> None:
            if broker not in control_brokers(self):
                raise ControlError(f"delay: no running broker {broker} (brokers: {sorted(control_brokers(self))})")
            plane.set_delay(broker, ms)
        self._on_plane(apply)

    def requests(self, api: str | int | None = None, *, broker: int | None = None,
                 client_id: str | None = None) -> list[CapturedRequest]:
        """The captured requests (oldest first; control.capture.requests of them), filtered."""
        return self._on_plane(lambda plane: plane.requests.select(api, broker=broker, client_id=client_id))

    def clear_requests(self) -> None:
        self._on_plane(lambda plane: plane.requests.clear())

    def hook(self, fn: Callable[[ControlledRequest], Delay | Answer | None], *, api: str | int | None = None,
             broker: int | None = None, client_id: str | None = None, once: bool = False) -> Hook:
        """Call `fn` with each matching request, on the broker's thread (it must not block): it
        returns None (handle it), Delay(ms) (hold it, then handle it) or Answer(error=...) /
        Answer(body={...}) (the response instead). `once`: removed after it first answers or
        delays. `hook.remove()` (through `unhook`) ends it."""
        return self._on_plane(lambda plane: plane.hook(fn, api=api, broker=broker, client_id=client_id, once=once))

    def unhook(self, hook: Hook) -> None:
        self.in_broker(hook.remove)

    def close_connections(self, broker: int | None = None) -> int:
        """Close the client connections of one broker (all when None) now; how many were open."""
        def close() -> int:
            brokers = control_brokers(self)
            if broker is not None and broker not in brokers:
                raise ControlError(f"close connections: no running broker {broker} (brokers: {sorted(brokers)})")
            return sum(b.control.close_connections() for n, b in brokers.items() if broker in (None, n))
        return self.in_broker(close)

    def drop(self, api: str | int, count: int = 1, *, broker: int | None = None, client_id: str | None = None,
             close: bool = False) -> None:
        """The next `count` requests of `api` are handled but never answered, and their connection
        goes silent until the client gives up (close=True: closed instead of answered): the
        `drop` and `close` fault actions (minibroker.faults), on one broker or all."""
        from minibroker.control.rules import api_key_of
        from minibroker.faults import FaultRule
        from minibroker.protocol.messages import api_name

        name = api_name(api_key_of(api))
        if count < 1:
            raise ControlError(f"drop {name}: count must be at least 1, not {count}")

        def add() -> None:
            brokers = control_brokers(self)
            if broker is not None and broker not in brokers:
                raise ControlError(f"drop {name}: no running broker {broker} (brokers: {sorted(brokers)})")
            for node_id, b in brokers.items():
                if broker in (None, node_id):
                    b.faults.add(FaultRule(name, "close" if close else "drop", limit=count, client_id=client_id))
        self.in_broker(add)

    def advance(self, seconds: float = 0, *, minutes: float = 0, hours: float = 0, days: float = 0) -> None:
        """Move every broker's clock forward (minibroker.clock.BrokerClock.advance)."""
        total = seconds + 60 * minutes + 3600 * hours + 86400 * days
        def move() -> None:
            for broker in control_brokers(self).values():
                broker.clock.advance(total)
        self.in_broker(move)
