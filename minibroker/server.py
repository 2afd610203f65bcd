"""The trio shell: listeners and one sequential loop per connection.

Each connection reads one request, handles it (perhaps waiting in purgatory), writes its response,
then reads the next, as Kafka does by muting a channel until its response is sent; responses stay in
request order for free. Clients pipeline their requests in the socket buffer meanwhile.

A quota throttle (minibroker.client_quotas) extends that mute: the response goes out at once and
the loop sleeps for the throttle time before reading on (KIP-219), ending early only when the client
closes the connection; for request versions whose clients do not throttle themselves, the response
itself is held back that long. There is one
listener per entry of `listeners` (PLAINTEXT, SASL_PLAINTEXT), and optionally the /metrics server.
"""

from __future__ import annotations

import logging
import signal
import socket
import time

import trio

from minibroker.broker import Broker, Connection
from minibroker.config import BrokerConfig
from protocol.framing import FrameDecoder, FrameError
from protocol.messages import ProtocolError

log = logging.getLogger(__name__)

READ_SIZE = 1 << 20
# A `lose` fault ends early once the client has sent nothing for this long (it has no more requests
# in flight), so a client with few in flight meets a broken connection, not a silent one.
LOSE_IDLE_S = 0.05


async def serve_connection(broker: Broker, stream: trio.SocketStream, conn: Connection) -> None:
    decoder = FrameDecoder(broker.config["socket.request.max.bytes"])
    quotas = broker.quotas
    losing = 0  # a `lose` fault: how many more responses vanish before the connection breaks
    try:
        while True:
            quotas.start_request_cycle(conn)
            frame = decoder.next_frame()
            while frame is None:
                size = min(READ_SIZE, max(decoder.wants, 65536))
                if losing:  # a `lose` fault lasts while the client keeps sending, then breaks
                    with trio.move_on_after(LOSE_IDLE_S) as idle:
                        data = await stream.receive_some(size)
                    if idle.cancelled_caught:
                        return
                else:
                    data = await stream.receive_some(size)
                if not data:
                    if not decoder.at_frame_boundary():
                        log.info("%s closed mid-frame (%d bytes buffered)", conn.peer, decoder.buffered)
                    return
                decoder.receive_data(data)
                frame = decoder.next_frame()
            response = await broker.handle_frame(frame, conn)
            if broker.faults.rules and (fault := _fault_for(broker, frame, conn)) is not None:
                if fault.action == "close":
                    return
                if fault.action == "drop":
                    await _hang_until_peer_closes(stream)
                    return
                if fault.action == "lose":
                    losing = fault.count
                else:
                    await trio.sleep(fault.delay_ms / 1000)
            if losing:  # handled, never answered; then the connection breaks
                losing -= 1
                if not losing:
                    return
                continue
            delay_s = response.throttle_ms / 1000
            if response.data is not None:
                if delay_s and not response.client_throttles:
                    # A client of this version would not wait by itself: hold its response back.
                    await trio.sleep(delay_s)
                    delay_s = 0
                await stream.send_all(response.data)
            quotas.end_request_cycle(conn)  # the sending counts too (KIP-124 network-thread time)
            if response.close:
                return
            if delay_s and not await _wait_out_throttle(stream, delay_s):
                return  # the client went away during its throttle
    except (FrameError, ProtocolError) as exc:
        broker.metrics.closed_for_protocol_errors += 1
        log.warning("closing connection from %s: %s", conn.peer, exc)
    except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
        pass
    except OSError as exc:  # a storage fault a handler did not answer itself: this connection only
        log.error("storage error while serving %s, closing its connection: %s", conn.peer, exc)
    except Exception:
        log.exception("bug while serving %s; closing its connection", conn.peer)


async def _wait_out_throttle(stream: trio.abc.Stream, delay_s: float) -> bool:
    """KIP-219: the response is out; read nothing more from this client until the quota throttle is
    over (Kafka mutes the channel). False when the client closed the connection meanwhile: a peek
    (MSG_PEEK reads nothing) notices it, so a crash-looping client's muted connections do not pile
    up for the whole throttle (the producer-id quota's can last a window). If the client sent more
    requests instead, they wait in the socket until the throttle is over."""
    sock = getattr(stream, "socket", None)
    if sock is None:  # not a socket (tests' in-memory streams): just wait
        await trio.sleep(delay_s)
        return True
    with trio.move_on_after(delay_s):
        try:
            if not await sock.recv(1, socket.MSG_PEEK):
                return False
        except OSError:
            return False
        await trio.sleep_forever()
    return True


async def _hang_until_peer_closes(stream: trio.SocketStream) -> None:
    """A connection that went silent after the append: read and discard until the client gives up."""
    with trio.move_on_after(600):
        while await stream.receive_some(65536):
            pass


def _fault_for(broker: Broker, frame: bytes, conn: Connection):
    handler = broker.handlers.get(int.from_bytes(frame[:2], "big", signed=True))
    return broker.faults.after_request(handler.name, conn.client_id) if handler else None


async def _connection_task(broker: Broker, stream: trio.SocketStream, listener: str = "PLAINTEXT") -> None:
    try:
        host, port = stream.socket.getpeername()[:2]
        peer = f"{host}:{port}"
    except OSError:
        peer = "?"
    conn = broker.new_connection(peer, listener)
    try:
        async with stream:
            await serve_connection(broker, stream, conn)
    finally:
        broker.connection_closed(conn)


async def serve(config: BrokerConfig, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run a broker until cancelled. Reports (host, port, broker) of the first listener through
    task_status once listening; `broker.listeners` has every listener by name."""
    started = time.perf_counter()
    broker = Broker(config)
    try:
        bound = []
        for entry in config["listeners"]:
            sockets = await trio.open_tcp_listeners(entry.port, host=entry.host)
            bound_host, bound_port = sockets[0].socket.getsockname()[:2]
            broker.set_listener(bound_host, bound_port, entry.name)
            bound.append((entry.name, sockets))
        broker.publish_cluster_metadata()  # KIP-257: the callback learns the cluster at start
        async with trio.open_nursery() as nursery:
            nursery.start_soon(broker.run_background)
            nursery.start_soon(broker.groups.run)
            for name, sockets in bound:
                nursery.start_soon(trio.serve_listeners, _connection_task_for(broker, name), sockets)
            nursery.start_soon(broker.quotas.run_housekeeping)
            nursery.start_soon(broker.quotas.run_pid_cache_cleanup)
            if config["metrics.listen"] is not None:
                from minibroker.metrics_http import serve_metrics

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


def _connection_task_for(broker: Broker, listener: str = "PLAINTEXT"):
    async def handler(stream: trio.SocketStream) -> None:
        await _connection_task(broker, stream, listener)

    return handler


async def serve_until_signalled(config: BrokerConfig, ready_line: bool = True) -> None:
    """Serve until SIGINT or SIGTERM, then shut down cleanly (logs closed, markers written)."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            host, port, broker = await nursery.start(serve, config)
            if ready_line:
                extra = "".join(f" {name}={h}:{p}" for name, (h, p) in list(broker.listeners.items())[1:])
                if broker.metrics_address is not None:
                    extra += " metrics=http://%s:%d/metrics" % broker.metrics_address
                print(
                    f"minibroker ready: bootstrap.servers={host}:{port} data={broker.data_dir}{extra}",
                    flush=True,
                )
            async for signum in signals:
                log.info("received %s, shutting down", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break
