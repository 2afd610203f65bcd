"""The trio shell: listeners, an accept loop per listener, and one sequential loop per connection.

Each connection reads one request, handles it (perhaps waiting in purgatory), writes its response,
then reads the next, as Kafka does by muting a channel until its response is sent; responses stay in
request order for free. Clients pipeline their requests in the socket buffer meanwhile.

A quota throttle (minibroker.client_quotas) extends that mute: the response goes out at once and
the loop sleeps for the throttle time before reading on (KIP-219), ending early only when the client
closes the connection; for every request version, as Kafka does (its RequestHandlerHelper sends the
response and mutes the channel; only clients read shouldClientThrottle). There is one
listener per entry of `listeners` (PLAINTEXT, SASL_PLAINTEXT), and optionally the /metrics server.

Limits (minibroker.limits, Kafka's names): the accept loop stops accepting at max.connections,
waits out max.connection.creation.rate (broker-wide and per listener, KIP-612), holds a connection
over its IP's connection_creation_rate for the throttle time and then closes it
(minibroker.quotas.connection_quota), and closes a connection over max.connections.per.ip at once; the connection loop closes a connection
that has completed no request for connections.max.idle.ms (counted from its last response, so a
frame dribbled byte by byte does not keep it open), caps a frame at sasl.server.max.receive.size
until SASL authentication completes, and takes each request's bytes from queued.max.request.bytes
before reading its body.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import signal
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from minibroker.broker import Broker
from minibroker.clock import BrokerClock
from minibroker.config import BrokerConfig
from minibroker.context import Connection
from minibroker.listen import bind
from minibroker.log_context import broker_log_context
from minibroker.metrics_http import serve_metrics
from minibroker.principal_mapping import NoMatchingRule
from minibroker.tls import TlsListener
from minibroker.protocol.fetch_response import FrameParts
from minibroker.protocol.framing import FrameDecoder, FrameError
from minibroker.protocol.messages import ProtocolError

log = logging.getLogger(__name__)

READ_SIZE = 1 << 20
# A `lose` fault ends early once the client has sent nothing for this long (it has no more requests
# in flight), so a client with few in flight meets a broken connection, not a silent one.
LOSE_IDLE_S = 0.05


# accept() errors that mean "out of descriptors or memory for now": wait and retry (as trio's
# serve_listeners does), the broker carries on.
ACCEPT_CAPACITY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}


async def serve_connection(broker: Broker, stream: trio.abc.Stream, conn: Connection) -> None:
    idle_ms = broker.config["connections.max.idle.ms"]
    idle = IdleWatch(idle_ms / 1000 if idle_ms >= 0 else math.inf, broker.clock)
    decoder = FrameDecoder(broker.config["socket.request.max.bytes"])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(idle.watch)
        with idle.scope:
            await _serve_requests(broker, stream, conn, decoder, idle)
        nursery.cancel_scope.cancel()
    if idle.scope.cancel_called:
        broker.metrics.closed_idle += 1
        log.info("closing connection from %s: no request completed in connections.max.idle.ms (%d ms)%s",
                 conn.peer, idle_ms, f", {decoder.buffered} byte(s) of a frame buffered" if decoder.buffered else "")


async def _serve_requests(broker: Broker, stream: trio.abc.Stream, conn: Connection, decoder: FrameDecoder,
                          idle: IdleWatch) -> None:
    config = broker.config
    memory = broker.request_memory
    quotas = broker.quotas
    clock = broker.clock
    # A plain socket is read and written directly (DirectSocketIO); other streams through trio.
    direct = DirectSocketIO(stream.socket.fileno()) if isinstance(stream, trio.SocketStream) else None
    losing = 0  # a `lose` fault: how many more responses vanish before the connection breaks
    try:
        while True:
            quotas.start_request_cycle(conn)
            if not conn.authenticated or conn.sasl is not None:  # Kafka's SaslServerAuthenticator's smaller cap
                decoder.set_limit(config["sasl.server.max.receive.size"], "sasl.server.max.receive.size")
            else:
                decoder.set_limit(config["socket.request.max.bytes"], "socket.request.max.bytes")
            reserved = 0
            try:
                # Idle time runs from the last response: bytes of an unfinished frame do not reset it.
                # A `lose` fault lasts while the client keeps sending, then the connection breaks.
                with clock.move_on_after(LOSE_IDLE_S) if losing else _NO_DEADLINE as lost:
                    idle.start()
                    frame = decoder.next_frame()
                    while frame is None:
                        if memory.bounded and not reserved and decoder.pending_size >= 0:
                            reserved = decoder.pending_size
                            await memory.acquire(reserved)  # read no more until the request fits
                        # A large body is received where it will be handled (no copy), else a chunk.
                        target = decoder.receive_buffer() if direct is not None else None
                        if target is not None and direct is not None:
                            count = await direct.recv_into(target)
                            del target  # no view of the frame may outlive its reading (FrameDecoder.recycle)
                            decoder.received_into(count)
                        else:
                            size = min(READ_SIZE, max(decoder.wants, 65536))
                            data = await (direct.recv(size) if direct is not None else stream.receive_some(size))
                            count = len(data)
                            decoder.receive_data(data)
                        if not count:
                            if not decoder.at_frame_boundary():
                                log.info("%s closed mid-frame (%d bytes buffered)", conn.peer, decoder.buffered)
                            return
                        frame = decoder.next_frame()
                    if memory.bounded and not reserved:  # the whole frame came in one read
                        reserved = len(frame)
                        await memory.acquire(reserved)
                    idle.stop()
                if lost.cancelled_caught or idle.scope.cancel_called:
                    return  # (the deadline passed as the frame completed: closed before it is handled)
                assert frame is not None  # the loop above ends with a frame or returns
                response = await broker.handle_frame(frame, conn)
            finally:
                memory.release(reserved)
            if broker.faults.rules and (fault := _fault_for(broker, frame, conn)) is not None:
                if fault.action == "close":
                    return
                if fault.action == "drop":
                    await _hang_until_peer_closes(stream, clock)
                    return
                if fault.action == "lose":
                    losing = fault.count
                else:
                    await clock.sleep(fault.delay_ms / 1000)
            decoder.recycle(frame)  # its memory takes the next large request, if nothing holds it
            del frame
            if losing:  # handled, never answered; then the connection breaks
                losing -= 1
                if not losing:
                    return
                continue
            delay_s = response.throttle_ms / 1000
            if response.data is not None:
                if delay_s and response.delay_response:
                    await clock.sleep(delay_s)
                    delay_s = 0
                if direct is not None and type(response.data) is bytes:
                    await direct.send_all(response.data)
                else:
                    await send_frame(stream, response.data)
            quotas.end_request_cycle(conn)  # the sending counts too (KIP-124 network-thread time)
            if direct is not None:
                await direct.checkpoint()  # let the others run if this request never waited
            if response.close:
                return
            if delay_s and not await _wait_out_throttle(stream, delay_s, clock):
                return  # the client went away during its throttle
    except (FrameError, ProtocolError) as exc:
        broker.metrics.closed_for_protocol_errors += 1
        log.warning("closing connection from %s: %s%s", conn.peer, exc, _wrong_protocol_hint(exc, conn))
    except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
        pass
    except OSError as exc:  # a storage fault a handler did not answer itself: this connection only
        log.error("storage error while serving %s, closing its connection: %s", conn.peer, exc)
    except Exception:
        log.exception("bug while serving %s; closing its connection", conn.peer)


def _wrong_protocol_hint(exc: Exception, conn: Connection) -> str:
    """What a first frame size that is no size at all most likely is: a TLS handshake (0x16 0x03 ...)
    on a listener without TLS, or an HTTP request."""
    size = getattr(exc, "size", None)
    if size is None or size < 0:
        return ""
    first = size.to_bytes(4, "big")
    if first[0] == 0x16 and first[1] == 0x03:
        return f" (it is a TLS handshake: the client uses SSL on the {conn.listener} listener, which has no TLS)"
    if first in (b"GET ", b"POST", b"PUT ", b"HEAD"):
        return " (it is an HTTP request, not Kafka's protocol)"
    return ""


class IdleWatch:
    """connections.max.idle.ms for one connection, without a timer per request: the loop marks
    when it starts reading a request (`start`) and when it has one (`stop`), and a task of the
    connection's own (`watch`) sleeps until the request being read is due and cancels `scope`, which
    the loop runs in, if it still is not read. A trio deadline per request (a CancelScope entered
    and left, registered and unregistered) was some 20 Python calls of trio's per request; this is
    two attribute writes and a clock read, and the watch wakes about once per idle period."""

    __slots__ = ("idle_s", "clock", "deadline", "reading", "scope")

    def __init__(self, idle_s: float, clock: BrokerClock) -> None:
        self.idle_s = idle_s
        self.clock = clock
        self.deadline = math.inf
        self.reading = False
        self.scope = trio.CancelScope()

    def start(self) -> None:
        """A request is being read (idle time runs from the end of the previous one)."""
        self.deadline = self.clock.monotonic() + self.idle_s
        self.reading = True

    def stop(self) -> None:
        """The request is read: what follows (handling it, the response) is not idle time."""
        self.reading = False

    async def watch(self) -> None:
        """Cancel `scope` once a request has been read for longer than idle_s. A request started
        after the watch went to sleep is due later than it wakes (its deadline is at least idle_s
        after the sleep began), so waking at the deadline of the request in progress, or idle_s on
        when there is none, is never late."""
        clock = self.clock
        while True:
            now = clock.monotonic()
            if self.reading and now >= self.deadline:
                self.scope.cancel()
                return
            await clock.sleep_until(self.deadline if self.reading else now + self.idle_s)


class _NoDeadline:
    """A `with` that never cancels, in place of a CancelScope where there is no deadline."""

    cancelled_caught = False

    def __enter__(self) -> _NoDeadline:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_NO_DEADLINE = _NoDeadline()


class DirectSocketIO:
    """The connection loop's reads and writes on a socket, made on its descriptor directly (os.read,
    os.readv, os.write), going through trio only to wait when the socket is not ready.

    trio's socket calls make every call a checkpoint: a pass of the scheduler (and an epoll_wait)
    even when the bytes are there. A Produce request took three of them, some 130 Python calls of
    trio's beside the handler's 200; under bench_load's four producers this loop costs 4% less
    broker CPU per record (docs/benchmarks.md). What the checkpoints gave is kept: a request
    that never had to wait yields once at its end (`checkpoint`), so a client that always has its
    next request ready cannot starve the other connections, and a cancelled loop stops there or in
    a wait. A socket error other than a closed connection is trio's BrokenResourceError, as from
    trio's calls (so the loop never takes it for a storage error)."""

    __slots__ = ("fd", "waited")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.waited = False  # whether the request in progress has waited (and so yielded) yet

    async def recv_into(self, target: memoryview) -> int:
        """Receive into `target`: the count (0 when the peer closed)."""
        return await self._call(os.readv, trio.lowlevel.wait_readable, (target,))

    async def recv(self, max_bytes: int) -> bytes:
        """Up to `max_bytes` received (b"" when the peer closed)."""
        return await self._call(os.read, trio.lowlevel.wait_readable, max_bytes)

    async def send_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            sent = await self._call(os.write, trio.lowlevel.wait_writable, view)
            if not sent:  # a socket never takes nothing without an error; do not spin on it
                raise trio.BrokenResourceError("socket write took no bytes")
            view = view[sent:]

    async def checkpoint(self) -> None:
        """End of a request: yield to the other tasks unless it waited (which yielded already)."""
        if not self.waited:
            await trio.lowlevel.checkpoint()
        self.waited = False

    async def _call(self, call: Callable[[int, Any], Any], wait: Callable[[int], Awaitable[None]], arg: Any) -> Any:
        """`call(fd, arg)`, waiting with `wait(fd)` while the socket is not ready."""
        while True:
            try:
                return call(self.fd, arg)
            except BlockingIOError:
                self.waited = True
                await wait(self.fd)
            except ConnectionError:
                raise
            except OSError as exc:
                raise trio.BrokenResourceError(f"socket error: {exc}") from exc


# At most this many buffers in one sendmsg (Linux's IOV_MAX is 1024).
MAX_IOV = 512


async def send_frame(stream: trio.abc.Stream, data: bytes | FrameParts) -> None:
    """Send one response frame. A FrameParts (a Fetch response keeping its records uncopied,
    minibroker.protocol.fetch_response) goes out with vectored sends (sendmsg) on a socket, the kernel
    gathering the buffers; elsewhere buffer by buffer."""
    if not isinstance(data, FrameParts):
        await stream.send_all(data)
        return
    sock = getattr(stream, "socket", None)
    if sock is None or not hasattr(sock, "sendmsg"):
        # TLS (one write makes full records, not one small record per buffer) or a test's stream.
        await stream.send_all(b"".join(data))
        return
    buffers = [memoryview(part) for part in data if len(part)]
    while buffers:
        sent = await sock.sendmsg(buffers[:MAX_IOV])
        while sent:  # drop what went out; a buffer sent in part stays, cut to its rest
            if sent >= len(buffers[0]):
                sent -= len(buffers.pop(0))
            else:
                buffers[0] = buffers[0][sent:]
                sent = 0


async def _wait_out_throttle(stream: trio.abc.Stream, delay_s: float, clock: BrokerClock) -> bool:
    """KIP-219: the response is out; read nothing more from this client until the quota throttle is
    over (Kafka mutes the channel). False when the client closed the connection meanwhile: a peek
    (MSG_PEEK reads nothing) notices it, so a crash-looping client's muted connections do not pile
    up for the whole throttle (the producer-id quota's can last a window). If the client sent more
    requests instead, they wait in the socket until the throttle is over."""
    sock = getattr(getattr(stream, "transport_stream", stream), "socket", None)  # under TLS, the TCP socket's
    if sock is None:  # not a socket (tests' in-memory streams): just wait
        await clock.sleep(delay_s)
        return True
    with clock.move_on_after(delay_s):
        try:
            if not await sock.recv(1, socket.MSG_PEEK):
                return False
        except OSError:
            return False
        await trio.sleep_forever()
    return True


async def _hang_until_peer_closes(stream: trio.abc.Stream, clock: BrokerClock) -> None:
    """A connection that went silent after the append: read and discard until the client gives up."""
    with clock.move_on_after(600):
        while await stream.receive_some(65536):
            pass


def _fault_for(broker: Broker, frame: bytes | bytearray, conn: Connection):
    handler = broker.handlers.get(int.from_bytes(frame[:2], "big", signed=True))
    return broker.faults.after_request(handler.name, conn.client_id) if handler else None


def sole_exception(exc: BaseException) -> BaseException:
    """The one error inside (nested) exception groups of one member each, as trio's nurseries
    wrap a start-up failure; a group with several different errors is returned as it is."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _peer(stream: trio.SocketStream) -> tuple[str, str]:
    """(address, address:port) of the client."""
    try:
        host, port = stream.socket.getpeername()[:2]
        return host, f"{host}:{port}"
    except OSError:
        return "?", "?"


async def _connection_task(broker: Broker, stream: trio.SocketStream, listener: str, ip: str, peer: str) -> None:
    conn = broker.new_connection(peer, listener)
    try:
        async with stream:
            with broker.control.connection_scope(conn):  # closed on demand (minibroker.control)
                tls = conn.security.tls if conn.security is not None else None
                if tls is None:
                    await serve_connection(broker, stream, conn)
                    return
                secure = trio.SSLStream(stream, tls.context, server_side=True)
                if await _tls_handshake(broker, secure, conn, tls):
                    await serve_connection(broker, secure, conn)
    finally:
        broker.connection_closed(conn)
        broker.connection_quotas.release(ip)


async def _tls_handshake(broker: Broker, stream: trio.SSLStream, conn: Connection, tls: TlsListener) -> bool:
    """The TLS handshake of an SSL or SASL_SSL connection, within connections.max.idle.ms; then, on an
    SSL listener, its principal from the client's certificate. False (after one log line) when it
    fails: bad bytes, an untrusted, expired or missing client certificate, a client that does not
    trust ours, or a handshake that never completes."""
    idle_ms = broker.config["connections.max.idle.ms"]
    reason = None
    with broker.clock.move_on_after(idle_ms / 1000 if idle_ms >= 0 else math.inf) as deadline:
        try:
            await stream.do_handshake()
        except trio.BrokenResourceError as exc:
            reason = _tls_failure(exc.__cause__ or exc)
    if deadline.cancelled_caught:
        reason = f"the TLS handshake did not complete in connections.max.idle.ms ({idle_ms} ms)"
    if reason is None and conn.security is not None and not conn.security.sasl:
        try:
            conn.principal = tls.principal(stream)
        except NoMatchingRule as exc:
            reason = f"ssl.principal.mapping.rules give its certificate no principal: {exc}"
    if reason is None:
        return True
    broker.metrics.failed_tls_handshakes += 1
    log.info("closing connection from %s on listener %s: %s", conn.peer, conn.listener, reason)
    return False


# OpenSSL's reasons, and what they mean for a Kafka client.
_TLS_HINTS = {
    "WRONG_VERSION_NUMBER": "it is not a TLS client: PLAINTEXT bytes on an SSL listener?",
    "HTTP_REQUEST": "it sent an HTTP request",
    "UNSUPPORTED_PROTOCOL": "no TLS version in common (ssl.enabled.protocols)",
    "NO_SHARED_CIPHER": "no cipher suite in common (ssl.cipher.suites)",
    "PEER_DID_NOT_RETURN_A_CERTIFICATE": "it sent no certificate and ssl.client.auth=required",
    "TLSV1_ALERT_UNKNOWN_CA": "the client does not trust this listener's certificate",
    "SSLV3_ALERT_BAD_CERTIFICATE": "the client refused this listener's certificate (wrong host name?)",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": "the client says this listener's certificate has expired",
}


def _tls_failure(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        reason = exc.reason or ""
        hint = _TLS_HINTS.get(reason)
        text = str(exc.verify_message) if isinstance(exc, ssl.SSLCertVerificationError) else (reason or str(exc))
        if isinstance(exc, ssl.SSLCertVerificationError):
            return f"TLS handshake failed: the client's certificate does not verify ({text})"
        return f"TLS handshake failed: {text}" + (f" ({hint})" if hint else "")
    if isinstance(exc, trio.BrokenResourceError) or isinstance(exc, ConnectionError) or not str(exc):
        return "TLS handshake failed: the client closed the connection during it"
    return f"TLS handshake failed: {exc}"


async def _accept_loop(broker: Broker, listener: trio.SocketListener, name: str, nursery: trio.Nursery) -> None:
    """Accept clients of one listener within max.connections, the connection-creation rates
    (KIP-612) and max.connections.per.ip, in Kafka's acceptor's order: the broker-wide and listener
    rates delay the acceptor, the IP rate refuses, then the per-IP count refuses."""
    quotas = broker.connection_quotas
    rates = broker.quotas.connection_rates
    clock = broker.clock
    async with listener:
        while True:
            await quotas.wait_for_slot()
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in ACCEPT_CAPACITY_ERRNOS:
                    raise
                log.error("accept on %s failed: %s; retrying in 0.1 s", name, os.strerror(exc.errno))
                await clock.sleep(0.1)
                continue
            ip, peer = _peer(stream)
            delay_ms = rates.record_accept(name, clock.monotonic_ms())
            if delay_ms:
                # Kafka's acceptor blocks holding the accepted connection; the ones behind it wait
                # in the listen backlog.
                log.debug("listener %s over max.connection.creation.rate: accepting again in %d ms", name, delay_ms)
                await clock.sleep(delay_ms / 1000)
            refused = rates.record_ip(name, ip, clock.monotonic_ms())
            if refused is not None:
                log.debug("connection from %s over connection_creation_rate=%d for %s: closing it in %d ms",
                          peer, refused.rate, ip, refused.throttle_ms)
                nursery.start_soon(_close_after, stream, refused.throttle_ms / 1000, quotas.share, clock)
                continue
            if not quotas.admit(ip):
                log.info("rejected connection from %s: the address already has max.connections.per.ip=%d",
                         peer, quotas.ip_limit(ip))
                await trio.aclose_forcefully(stream)
                continue
            nursery.start_soon(_connection_task, broker, stream, name, ip, peer)


async def _close_after(stream: trio.SocketStream, delay_s: float, share, clock: BrokerClock) -> None:
    """A connection over its IP's connection_creation_rate: Kafka keeps it open, unread, for the
    throttle time, then closes it (so a reconnecting client is slowed to the rate). It holds a
    descriptor meanwhile: when the connections' share of the descriptor budget has none left it is
    closed at once instead."""
    held = share is None or share.try_acquire()
    try:
        if held:
            await clock.sleep(delay_s)
    finally:
        await trio.aclose_forcefully(stream)
        if held and share is not None:
            share.release()


async def serve(config: BrokerConfig | None = None, *, broker: Broker | None = None, clock: BrokerClock | None = None,
                task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run a broker until cancelled: a new one from `config` (on `clock`, a new BrokerClock by
    default), or `broker`, built beforehand (several brokers in one trio run, each with its own
    clock). Reports (host, port, broker) of the first listener through task_status once listening;
    `broker.listeners` has every listener by name. The broker is closed when serving ends. Its log
    lines, and those of every task serving it, say "[broker N]" (minibroker.log_context)."""
    if broker is not None:
        node_id = broker.node_id
    elif config is not None:
        node_id = config["node.id"]
    else:
        raise TypeError("serve() needs a config or a broker")
    with broker_log_context(node_id):
        await _serve(config, broker, clock, task_status)


async def _serve(config: BrokerConfig | None, broker: Broker | None, clock: BrokerClock | None, task_status) -> None:
    started = time.perf_counter()
    if broker is None:
        assert config is not None
        broker = Broker(config, clock=clock)
    config = broker.config
    try:
        bound = []
        for entry in config["listeners"]:
            sockets = await bind(entry.host, entry.port, f"{entry.name} listener")
            bound_host, bound_port = sockets[0].socket.getsockname()[:2]
            broker.set_listener(bound_host, bound_port, entry.name)
            bound.append((entry.name, sockets))
        broker.publish_cluster_metadata()  # KIP-257: the callback learns the cluster at start
        async with trio.open_nursery() as nursery:
            broker.run(nursery)
            for name, sockets in bound:
                for listener in sockets:
                    nursery.start_soon(_accept_loop, broker, listener, name, nursery)
            if config["metrics.listen"] is not None:
                broker.metrics_address = await nursery.start(serve_metrics, broker, *config["metrics.listen"])
            log.info(
                "minibroker ready on %s:%d (data in %s, cluster %s) in %.0f ms",
                broker.advertised_host,
                broker.advertised_port,
                broker.data_dir,
                broker.cluster_id,
                (time.perf_counter() - started) * 1000,
            )
            task_status.started((broker.advertised_host, broker.advertised_port, broker))
    finally:
        broker.close()


async def serve_until_signalled(config: BrokerConfig, ready_line: bool = True, notes: list[str] | None = None) -> None:
    """Serve until SIGINT or SIGTERM, then shut down cleanly (logs closed, markers written). `notes`:
    lines printed after the ready line (the client settings of --tls-self-signed)."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            control = None
            if config["control.listen"] is not None:  # a broker the endpoint can stop and start
                from minibroker.control.host import SingleBrokerHost
                from minibroker.control.http import serve_control

                host_target = SingleBrokerHost(config, serve)
                host, port, broker = await nursery.start(host_target.run)
                control = await nursery.start(serve_control, host_target, *config["control.listen"])
            else:
                host, port, broker = await nursery.start(serve, config)
            if ready_line:
                extra = "".join(f" {name}={h}:{p}" for name, (h, p) in list(broker.listeners.items())[1:])
                if broker.metrics_address is not None:
                    extra += " metrics=http://%s:%d/metrics" % broker.metrics_address
                if control is not None:
                    extra += " control=http://%s:%d/" % control
                print(
                    f"minibroker ready: bootstrap.servers={host}:{port} data={broker.data_dir}{extra}",
                    flush=True,
                )
                for line in notes or ():
                    print(line, flush=True)
            async for signum in signals:
                log.info("received %s, shutting down", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break
