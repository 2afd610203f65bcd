"""The control endpoint: the controls of minibroker.control as plain JSON over HTTP/1.1, so a test in
any language (Java's java.net.http, Go's net/http, curl) drives the brokers of a process. Served
when `control.listen` (`--control-listen HOST:PORT`) is set: on loopback unless it names another
address (a bare PORT or :PORT is 127.0.0.1). One request per connection (`Connection: close`).

    GET    /brokers                          {"brokers": [{"node_id", "host", "port", "running"}]}
    POST   /brokers/N/stop   {"kill": false} stop broker N (cleanly; kill: as kill -9)
    POST   /brokers/N/start                  start it again on the same port
    POST   /move-leader      {"topic", "partition", "broker"}
    POST   /shuffle-leaders
    POST   /move-coordinator {"group" | "transactional_id", "broker"}
    POST   /errors           {"api", "codes", "broker", "topic", "partition", "group", "client_id"}
    GET    /errors                           the stacks not used up yet
    DELETE /errors                           clear every stack
    POST   /delay            {"broker", "ms"}
    GET    /requests?api=NAME&broker=N&client_id=C   {"requests": [{"api", "version", "client_id", "body", ...}]}
    DELETE /requests                         forget the captured requests
    POST   /connections/close {"broker"}     close one broker's (or every) client connection
    POST   /connections/drop {"api", "count", "broker", "client_id", "close"}
                                             the next requests handled, never answered (or closed)
    POST   /clock/advance    {"seconds"}     move every broker's clock forward

API names are Kafka's (Produce, JoinGroup) or keys; error codes numbers or Kafka's names. A control
that cannot be done answers 400 (404 for an unknown path) with {"error": "..."} naming the verb, API
or broker at fault; the cluster verbs answer 501 where the process has no cluster to move.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from typing import Any, Protocol

import trio

from minibroker.clock import BrokerClock
from minibroker.control.rules import ControlError, ControlPlane, api_key_of
from minibroker.faults import FaultRule
from minibroker.protocol.messages import api_name
from minibroker.control.surface import shared_plane
from minibroker.listen import bind

log = logging.getLogger(__name__)

_MAX_HEAD = 16384
_MAX_BODY = 1 << 20
_TIMEOUT_S = 30
_STATUS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 413: "Payload Too Large",
           500: "Internal Server Error", 501: "Not Implemented"}


class NotInThisProcess(ControlError):
    """A cluster control this process cannot carry out (501)."""


class ControlTarget(Protocol):
    """What the endpoint drives, on the brokers' trio thread. `brokers()` gives the running ones;
    `endpoints()` every broker's (host, port) and whether it runs. The cluster verbs raise
    NotInThisProcess where there is nothing to move."""

    def brokers(self) -> dict[int, Any]: ...
    def endpoints(self) -> list[dict[str, Any]]: ...
    async def stop(self, node_id: int, kill: bool) -> None: ...
    async def start(self, node_id: int) -> None: ...
    async def move_leader(self, topic: str, partition: int, broker: int) -> None: ...
    async def shuffle_leaders(self) -> None: ...
    async def move_coordinator(self, broker: int, group: str | None, transactional_id: str | None) -> None: ...
    def advance(self, seconds: float) -> None: ...


def _int(body: dict[str, Any], key: str, verb: str, required: bool = True) -> int | None:
    value = body.get(key)
    if value is None:
        if required:
            raise ControlError(f"{verb}: {key!r} is required")
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ControlError(f"{verb}: {key!r} must be an integer, not {value!r}") from None


async def dispatch(target: ControlTarget, method: str, path: str, query: dict[str, str],
                   body: dict[str, Any]) -> tuple[int, Any]:
    """One control: (HTTP status, JSON value)."""
    parts = [p for p in path.split("/") if p]

    def plane() -> ControlPlane:
        return shared_plane(target.brokers())

    if parts == ["brokers"] and method == "GET":
        return 200, {"brokers": target.endpoints()}
    if len(parts) == 3 and parts[0] == "brokers" and parts[2] in ("stop", "start") and method == "POST":
        try:
            node_id = int(parts[1])
        except ValueError:
            raise ControlError(f"{parts[2]}: broker {parts[1]!r} is not a node id") from None
        if parts[2] == "stop":
            await target.stop(node_id, bool(body.get("kill", False)))
        else:
            await target.start(node_id)
        return 200, {"brokers": target.endpoints()}
    if parts == ["move-leader"] and method == "POST":
        topic = body.get("topic")
        if not topic:
            raise ControlError("move-leader: 'topic' is required")
        await target.move_leader(str(topic), _int(body, "partition", "move-leader") or 0,
                                 _int(body, "broker", "move-leader") or 0)
        return 200, {}
    if parts == ["shuffle-leaders"] and method == "POST":
        await target.shuffle_leaders()
        return 200, {}
    if parts == ["move-coordinator"] and method == "POST":
        group, txn = body.get("group"), body.get("transactional_id")
        if (group is None) == (txn is None):
            raise ControlError("move-coordinator: give one of 'group' or 'transactional_id'")
        await target.move_coordinator(_int(body, "broker", "move-coordinator") or 0, group, txn)
        return 200, {}
    if parts == ["errors"]:
        if method == "POST":
            if "api" not in body or "codes" not in body:
                raise ControlError("errors push: 'api' and 'codes' are required")
            broker = _int(body, "broker", "errors push", False)
            if broker is not None and broker not in target.brokers():
                raise ControlError(f"errors push: no running broker {broker} (brokers: {sorted(target.brokers())})")
            stack = plane().push(body["api"], body["codes"], broker=broker, topic=body.get("topic"),
                                 partition=_int(body, "partition", "errors push", False),
                                 group=body.get("group"), client_id=body.get("client_id"))
            return 200, {"pushed": stack.describe()}
        if method == "DELETE":
            plane().clear()
            return 200, {}
        if method == "GET":
            return 200, {"stacks": [s.describe() for s in plane().stacks]}
    if parts == ["delay"] and method == "POST":
        broker = _int(body, "broker", "delay")
        assert broker is not None
        if broker not in target.brokers():
            raise ControlError(f"delay: no running broker {broker} (brokers: {sorted(target.brokers())})")
        plane().set_delay(broker, _int(body, "ms", "delay") or 0)
        return 200, {}
    if parts == ["requests"]:
        if method == "GET":
            broker = int(query["broker"]) if query.get("broker", "").lstrip("-").isdigit() else None
            found = plane().requests.select(query.get("api") or None, broker=broker,
                                            client_id=query.get("client_id"))
            return 200, {"requests": [r.to_json() for r in found]}
        if method == "DELETE":
            plane().requests.clear()
            return 200, {}
    if parts == ["connections", "close"] and method == "POST":
        broker = _int(body, "broker", "close connections", False)
        brokers = target.brokers()
        if broker is not None and broker not in brokers:
            raise ControlError(f"close connections: no running broker {broker} (brokers: {sorted(brokers)})")
        return 200, {"closed": sum(b.control.close_connections() for n, b in brokers.items() if broker in (None, n))}
    if parts == ["connections", "drop"] and method == "POST":
        if "api" not in body:
            raise ControlError("connections drop: 'api' is required")
        api = api_name(api_key_of(body["api"]))
        count = _int(body, "count", f"drop {api}", False) or 1
        broker = _int(body, "broker", f"drop {api}", False)
        brokers = target.brokers()
        if broker is not None and broker not in brokers:
            raise ControlError(f"drop {api}: no running broker {broker} (brokers: {sorted(brokers)})")
        if count < 1:
            raise ControlError(f"drop {api}: count must be at least 1, not {count}")
        action = "close" if body.get("close") else "drop"
        for node_id, b in brokers.items():
            if broker in (None, node_id):
                b.faults.add(FaultRule(api, action, limit=count, client_id=body.get("client_id")))
        return 200, {}
    if parts == ["clock", "advance"] and method == "POST":
        value = body.get("seconds")
        try:
            seconds = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ControlError(f"clock advance: 'seconds' must be a number, not {value!r}") from None
        if not seconds >= 0:
            raise ControlError(f"clock advance: the clock only moves forward, not by {seconds}")
        target.advance(seconds)
        return 200, {}
    known = {"brokers", "move-leader", "shuffle-leaders", "move-coordinator", "errors", "delay", "requests",
             "connections", "clock"}
    if parts and parts[0] in known:
        return 405, {"error": f"{method} {path} is not a control (docs/control.md lists them)"}
    return 404, {"error": f"no control at {path} (GET /brokers, POST /errors, GET /requests, ...)"}


async def _read_request(stream: trio.abc.Stream) -> tuple[str, str, bytes] | None:
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        if len(buffer) > _MAX_HEAD:
            raise ControlError("request head too large")
        data = await stream.receive_some(65536)
        if not data:
            return None
        buffer += data
    head, _, rest = buffer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    request = lines[0].split()
    if len(request) != 3 or not request[2].startswith("HTTP/1."):
        raise ControlError(f"not an HTTP/1.x request line: {lines[0]!r}")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
        elif name.strip().lower() == "transfer-encoding" and value.strip().lower() != "identity":
            raise ControlError("send the body with a Content-Length (no chunked encoding)")
    if length > _MAX_BODY:
        raise ControlError(f"body of {length} bytes is over {_MAX_BODY}")
    while len(rest) < length:
        data = await stream.receive_some(65536)
        if not data:
            return None
        rest += data
    return request[0], request[1], rest[:length]


def _response(status: int, value: Any) -> bytes:
    body = (json.dumps(value, separators=(",", ":")) + "\n").encode()
    return (f"HTTP/1.1 {status} {_STATUS.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


async def handle(target: ControlTarget, stream: trio.abc.Stream, clock: BrokerClock) -> None:
    async with stream:
        try:
            with clock.move_on_after(_TIMEOUT_S):
                try:
                    request = await _read_request(stream)
                    if request is None:
                        return
                    method, raw_target, raw_body = request
                    url = urllib.parse.urlsplit(raw_target)
                    query = dict(urllib.parse.parse_qsl(url.query))
                    body = json.loads(raw_body) if raw_body.strip() else {}
                    if not isinstance(body, dict):
                        raise ControlError("the body must be a JSON object")
                    status, value = await dispatch(target, method.upper(), url.path, query, body)
                except NotInThisProcess as exc:
                    status, value = 501, {"error": str(exc)}
                except (ControlError, ValueError, KeyError) as exc:
                    status, value = 400, {"error": str(exc).strip('"')}
                except Exception as exc:
                    log.exception("bug in the control endpoint")
                    status, value = 500, {"error": f"{type(exc).__name__}: {exc}"}
                await stream.send_all(_response(status, value))
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            pass


async def serve_control(target: ControlTarget, host: str, port: int, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve the control endpoint until cancelled; reports the bound (host, port)."""
    listeners = await bind(host, port, "control.listen")
    bound_host, bound_port = listeners[0].socket.getsockname()[:2]
    if bound_host in ("0.0.0.0", "::"):
        bound_host = "127.0.0.1"
    log.info("control endpoint on http://%s:%d/", bound_host, bound_port)
    clock = BrokerClock()  # the endpoint's own timeouts: a test's clock moves do not cut them

    async def handler(stream: trio.SocketStream) -> None:
        await handle(target, stream, clock)

    task_status.started((bound_host, bound_port))
    await trio.serve_listeners(handler, listeners)
