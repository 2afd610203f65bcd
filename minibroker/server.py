"""The trio shell: listeners and one sequential loop per connection.

Each connection reads one request, handles it (perhaps waiting in purgatory), writes its response,
then reads the next, as Kafka does by muting a channel until its response is sent; responses stay in
request order for free. Clients pipeline their requests in the socket buffer meanwhile.
"""

from __future__ import annotations

import logging
import signal
import time

import trio

from minibroker.broker import Broker, Connection
from minibroker.config import BrokerConfig
from protocol.framing import FrameDecoder, FrameError
from protocol.messages import ProtocolError

log = logging.getLogger(__name__)

READ_SIZE = 1 << 20


async def serve_connection(broker: Broker, stream: trio.SocketStream, conn: Connection) -> None:
    decoder = FrameDecoder(broker.config["socket.request.max.bytes"])
    try:
        while True:
            frame = decoder.next_frame()
            while frame is None:
                data = await stream.receive_some(min(READ_SIZE, max(decoder.wants, 65536)))
                if not data:
                    if not decoder.at_frame_boundary():
                        log.info("%s closed mid-frame (%d bytes buffered)", conn.peer, decoder.buffered)
                    return
                decoder.receive_data(data)
                frame = decoder.next_frame()
            response = await broker.handle_frame(frame, conn)
            if response is not None:
                await stream.send_all(response)
    except (FrameError, ProtocolError) as exc:
        broker.metrics.closed_for_protocol_errors += 1
        log.warning("closing connection from %s: %s", conn.peer, exc)
    except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
        pass
    except Exception:
        log.exception("bug while serving %s; closing its connection", conn.peer)


async def _connection_task(broker: Broker, stream: trio.SocketStream) -> None:
    try:
        host, port = stream.socket.getpeername()[:2]
        peer = f"{host}:{port}"
    except OSError:
        peer = "?"
    conn = broker.new_connection(peer)
    try:
        async with stream:
            await serve_connection(broker, stream, conn)
    finally:
        broker.connection_closed(conn)


async def serve(config: BrokerConfig, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run a broker until cancelled. Reports (host, port) through task_status once listening."""
    started = time.perf_counter()
    broker = Broker(config)
    host, port = config["listeners"]
    try:
        listeners = await trio.open_tcp_listeners(port, host=host)
        bound_host, bound_port = listeners[0].socket.getsockname()[:2]
        broker.set_listener(bound_host, bound_port)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(broker.run_background)
            nursery.start_soon(trio.serve_listeners, _connection_task_for(broker), listeners)
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


def _connection_task_for(broker: Broker):
    async def handler(stream: trio.SocketStream) -> None:
        await _connection_task(broker, stream)

    return handler


async def serve_until_signalled(config: BrokerConfig, ready_line: bool = True) -> None:
    """Serve until SIGINT or SIGTERM, then shut down cleanly (logs closed, markers written)."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            host, port, broker = await nursery.start(serve, config)
            if ready_line:
                print(
                    f"minibroker ready: bootstrap.servers={host}:{port} data={broker.data_dir}",
                    flush=True,
                )
            async for signum in signals:
                log.info("received %s, shutting down", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break
