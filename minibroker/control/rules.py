"""What a test makes a broker do to the requests it receives, for ANY API: the request-control
seam between the connection loop and the handlers (minibroker.broker.Broker.handle_frame calls
`RequestControl.intercept` with each decoded request while any control is in force).

In the order they act on a request:

1. capture: the request is kept (minibroker.control.capture) when `control.capture.requests` > 0;
2. a round-trip delay set for the broker (`delay(broker, ms)`, librdkafka's broker_set_rtt): the
   request waits that long on the broker's clock before anything else happens to it;
3. hooks (kfake's ControlKey, KeepControl and SleepControl): a function that sees each matching
   request and returns None (let it through), `Delay(ms)` (hold it, then go on) or `Answer(...)`
   (the response: an error code put in every place the API carries one, or a body of its own);
4. error stacks (librdkafka's push_request_errors, with kfake's filters): `push(api, codes, broker,
   topic, partition, group, client_id)`; each matching request takes the next code off the stack
   and is answered with it INSTEAD of being handled (0 in a stack lets that request through);
   the response carries the code wherever the API has an error (minibroker.control.responses:
   per partition where the API answers per partition, top-level otherwise);
5. the `error` action of the `fault.injection` rules (minibroker.faults), now for any API: the
   same answer, every Nth matching request, up to `limit`.

The other fault actions (drop, close, delay, lose the response) act after the request is handled,
in the connection loop (minibroker.server); `close_connections` closes a broker's connections now.

A ControlPlane holds the stacks, hooks, delays and the capture; the brokers of one process share
one (minibroker.control.surface joins them), so a stack without `broker` is consumed by whichever
broker receives the next matching request.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

import trio
from kio.schema.errors import ErrorCode

from minibroker.control.apis import ControlError, api_key_of, error_code_of
from minibroker.control.capture import CapturedRequest, RequestLog, plain
from minibroker.control.responses import KEY_KINDS, error_body
from minibroker.protocol.entities import build
from minibroker.protocol.messages import api_name, encode_response

if TYPE_CHECKING:
    from minibroker.clock import BrokerClock
    from minibroker.context import Connection, RequestContext
    from minibroker.faults import FaultInjector

log = logging.getLogger(__name__)

PRODUCE_KEY = 0
FIND_COORDINATOR_KEY = 10


# ---- what a hook answers ------------------------------------------------------------------------


@dataclass(frozen=True)
class Delay:
    """A hook's answer: hold the request `ms` (broker clock), then go on with it."""

    ms: int


@dataclass(frozen=True)
class Answer:
    """A hook's answer: respond with `error` (in every place the API carries one), or with `body`
    (plain values as the handlers build them, minibroker.protocol.entities.build; missing fields
    take the schema's defaults), without handling the request."""

    error: int | str = 0
    body: dict[str, Any] | None = None


@dataclass
class ControlledRequest:
    """What a hook sees: the request as decoded (`request`, kio's object), and who sent it."""

    api: str
    api_key: int
    version: int
    client_id: str
    broker: int
    request: Any
    peer: str

    @property
    def body(self) -> dict[str, Any]:
        return plain(self.request)


@dataclass
class Hook:
    fn: Callable[[ControlledRequest], Delay | Answer | None]
    api: str | int | None = None
    broker: int | None = None
    client_id: str | None = None
    once: bool = False  # removed after it first answers or delays a request (kfake's default)
    calls: int = 0
    errors: int = 0  # calls that raised (logged; the request was handled)
    plane: ControlPlane | None = field(default=None, repr=False)

    def remove(self) -> None:
        if self.plane is not None and self in self.plane.hooks:
            self.plane.hooks.remove(self)


@dataclass
class ErrorStack:
    """Codes the next matching requests are answered with, first pushed first."""

    api: str | int
    codes: deque[int]
    broker: int | None = None
    topic: str | None = None
    partition: int | None = None
    group: str | None = None
    client_id: str | None = None
    api_key: int = -1

    def describe(self) -> dict[str, Any]:
        return {"api": api_name(self.api_key), "codes": list(self.codes), "broker": self.broker,
                "topic": self.topic, "partition": self.partition, "group": self.group, "client_id": self.client_id}


class ControlPlane:
    """The controls in force on the brokers that share it (module docstring)."""

    def __init__(self, capture_limit: int = 0) -> None:
        self.stacks: list[ErrorStack] = []
        self.hooks: list[Hook] = []
        self.rtt_ms: dict[int, int] = {}
        self.requests = RequestLog(capture_limit)

    @property
    def active(self) -> bool:
        return bool(self.stacks or self.hooks or self.rtt_ms or self.requests.limit)

    def push(self, api: str | int, codes: int | str | list[int | str] | tuple, *, broker: int | None = None,
             topic: str | None = None, partition: int | None = None, group: str | None = None,
             client_id: str | None = None) -> ErrorStack:
        key = api_key_of(api)
        if isinstance(codes, (int, str)):
            codes = [c for c in str(codes).split(",") if c.strip()] if isinstance(codes, str) else [codes]
        values = deque(error_code_of(c) for c in codes)
        if not values:
            raise ControlError(f"errors push {api_name(key)}: no error codes given")
        if partition is not None and topic is None:
            raise ControlError(f"errors push {api_name(key)}: a partition needs its topic")
        stack = ErrorStack(api, values, broker, topic, partition, group, client_id, key)
        self.stacks.append(stack)
        log.info("error stack pushed: %s", stack.describe())
        return stack

    def clear(self) -> None:
        self.stacks.clear()

    def hook(self, fn: Callable[[ControlledRequest], Delay | Answer | None], *, api: str | int | None = None,
             broker: int | None = None, client_id: str | None = None, once: bool = False) -> Hook:
        if api is not None:
            api_key_of(api)
        hook = Hook(fn, api, broker, client_id, once, plane=self)
        self.hooks.append(hook)
        return hook

    def set_delay(self, broker: int, ms: int) -> None:
        if ms < 0:
            raise ControlError(f"delay for broker {broker}: {ms} ms is negative")
        if ms:
            self.rtt_ms[broker] = ms
        else:
            self.rtt_ms.pop(broker, None)


class _Mentions:
    """The topics, partitions and groups a request names (for the stacks' filters)."""

    def __init__(self, ctx: RequestContext, request: Any) -> None:
        self.topics: set[str] = set()
        self.partitions: set[tuple[str, int]] = set()
        self.groups: set[str] = set()
        self._logs = ctx.logs
        self._walk(request, None, 0)
        if ctx.schema.api_key == FIND_COORDINATOR_KEY and getattr(request, "key_type", 0) == 0:
            key = getattr(request, "key", None)
            self.groups.update([key] if key else [])
            self.groups.update(getattr(request, "coordinator_keys", None) or ())

    def _topic_name(self, value: Any) -> str | None:
        if isinstance(value, str):
            return value
        if value is None:
            return None
        info = self._logs.resolve(None, value)
        return info.name if info is not None else None

    def _walk(self, obj: Any, topic: str | None, depth: int) -> None:
        if depth > 6 or obj is None or isinstance(obj, (str, bytes, bytearray, memoryview, int)):
            return
        from minibroker.control.responses import _attributes

        names = _attributes(obj)
        values = {n: getattr(obj, n, None) for n in names}
        for name, value in values.items():
            if KEY_KINDS.get(name) == "topic" and isinstance(value, str) and name != "index":
                topic = value
            elif name == "topic_id" and value is not None and topic is None:
                topic = self._topic_name(value)
        if topic is not None:
            self.topics.add(topic)
        for name, value in values.items():
            kind = KEY_KINDS.get(name)
            if kind == "partition" and isinstance(value, int) and topic is not None:
                self.partitions.add((topic, value))
            elif kind == "group" and isinstance(value, str):
                self.groups.add(value)
            elif isinstance(value, (tuple, list)):
                for item in value:
                    if isinstance(item, str) and name in ("groups", "group_ids", "groups_names"):
                        self.groups.add(item)
                    elif isinstance(item, int) and not isinstance(item, bool) and topic is not None and "partition" in name:
                        self.partitions.add((topic, item))
                    else:
                        self._walk(item, topic, depth + 1)


@dataclass(frozen=True)
class Answered:
    """The response that replaces handling (None: no response, a Produce with acks=0)."""

    data: bytes | None
    by: str


class RequestControl:
    """One broker's side of the controls: its node id, clock and fault rules, the shared plane, and
    its open connections (to close them on demand)."""

    def __init__(self, node_id: int, clock: BrokerClock, faults: FaultInjector, capture_limit: int = 0) -> None:
        self.node_id = node_id
        self.clock = clock
        self.faults = faults
        self.plane = ControlPlane(capture_limit)
        self.connections: dict[int, trio.CancelScope] = {}
        self.address: tuple[str, int] | None = None  # the control endpoint's, when one serves this broker

    @property
    def active(self) -> bool:
        return self.plane.active or bool(self.faults.rules)

    # -- connections ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def connection_scope(self, conn: Connection) -> Iterator[None]:
        """Serve a connection inside this: `close_connections` cancels it."""
        with trio.CancelScope() as scope:
            self.connections[conn.id] = scope
            try:
                yield
            finally:
                self.connections.pop(conn.id, None)

    def close_connections(self) -> int:
        """Close every client connection of this broker now (clients reconnect); how many."""
        count = len(self.connections)
        for scope in list(self.connections.values()):
            scope.cancel()
        if count:
            log.info("closing %d connection(s) on demand", count)
        return count

    # -- requests -------------------------------------------------------------------------------

    async def intercept(self, ctx: RequestContext, request: Any) -> Answered | None:
        """Apply the controls to a decoded request: an Answered replaces handling it, None lets it
        be handled (module docstring for the order)."""
        plane = self.plane
        schema = ctx.schema
        key = schema.api_key
        name = ctx.handler.api_name
        captured = None
        if plane.requests.limit:
            # A Produce holds views of the frame, which the connection reuses: converted now.
            decoded = plain(request) if key == PRODUCE_KEY else request
            captured = CapturedRequest(name, key, schema.version, ctx.client_id, decoded, self.node_id,
                                       ctx.header.correlation_id, ctx.connection.peer, self.clock.now_ms())
            plane.requests.add(captured)
        answered = await self._apply(ctx, request, plane)
        if answered is not None and captured is not None:
            captured.answered_by = answered.by
        return answered

    async def _apply(self, ctx: RequestContext, request: Any, plane: ControlPlane) -> Answered | None:
        schema = ctx.schema
        key = schema.api_key
        name = ctx.handler.api_name
        rtt = plane.rtt_ms.get(self.node_id)
        if rtt:
            await self.clock.sleep(rtt / 1000)
        for hook in list(plane.hooks):
            if not self._hook_matches(hook, key, ctx):
                continue
            hook.calls += 1
            try:
                result = hook.fn(ControlledRequest(name, key, schema.version, ctx.client_id, self.node_id, request,
                                                   ctx.connection.peer))
            except Exception:  # the test's function failed: say so, and handle the request
                log.exception("a hook on %s (%r) raised; the request is handled", name, hook.fn)
                hook.errors += 1
                continue
            if result is None:
                continue
            if hook.once:
                hook.remove()
            if isinstance(result, Delay):
                await self.clock.sleep(result.ms / 1000)
                continue
            if isinstance(result, Answer):
                if result.body is not None:
                    return self._answer(ctx, request, result.body, "hook")
                return self._error(ctx, request, error_code_of(result.error), "hook")
            raise ControlError(f"a hook on {name} returned {result!r}: None, Delay(ms) or Answer(...)")
        if plane.stacks:
            mentions: _Mentions | None = None
            for stack in plane.stacks:
                if stack.api_key != key or (stack.broker is not None and stack.broker != self.node_id) or (
                        stack.client_id is not None and stack.client_id != ctx.client_id):
                    continue
                if stack.topic is not None or stack.group is not None:
                    mentions = mentions or _Mentions(ctx, request)
                    if stack.group is not None and stack.group not in mentions.groups:
                        continue
                    if stack.topic is not None and (
                            (stack.topic, stack.partition) not in mentions.partitions if stack.partition is not None
                            else stack.topic not in mentions.topics):
                        continue
                code = stack.codes.popleft()
                if not stack.codes:
                    plane.stacks.remove(stack)
                log.info("error stack answers %s v%d from %r with %s", name, schema.version, ctx.client_id,
                         ErrorCode(code).name.upper() if code else "nothing (handled)")
                if code:
                    return self._error(ctx, request, code, "error")
                return None
        if self.faults.rules:
            rule = self.faults.before_request(ctx.handler.name, ctx.client_id)
            if rule is not None:
                return self._error(ctx, request, rule.error_code, "fault")
        return None

    def _hook_matches(self, hook: Hook, key: int, ctx: RequestContext) -> bool:
        return ((hook.api is None or api_key_of(hook.api) == key)
                and (hook.broker is None or hook.broker == self.node_id)
                and (hook.client_id is None or hook.client_id == ctx.client_id))

    def _error(self, ctx: RequestContext, request: Any, code: int, by: str) -> Answered:
        cluster = None
        if ctx.schema.api_key == 3:  # Metadata before v13 lists the brokers with the topics' errors
            cluster = {"brokers": ctx.cluster.brokers(ctx.connection.listener), "cluster_id": ctx.cluster.cluster_id,
                       "controller_id": ctx.cluster.controller_id}
        return self._answer(ctx, request, error_body(ctx.schema.api_key, ctx.schema.response, request, code, cluster), by)

    def _answer(self, ctx: RequestContext, request: Any, body: dict[str, Any], by: str) -> Answered:
        schema = ctx.schema
        if schema.api_key == PRODUCE_KEY and request.acks == 0:
            return Answered(None, by)
        response = build(schema.response, {**body, "throttle_time": 0})
        return Answered(encode_response(schema, ctx.header.correlation_id, response), by)
