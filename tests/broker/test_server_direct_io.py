"""The connection loop's direct socket I/O (minibroker.server.DirectSocketIO), in process over real
socketpairs: what trio's socket calls gave (yielding, errors as trio's) is kept without their
checkpoint on every call."""

from __future__ import annotations

import os
import socket
import struct

import pytest
import trio

from minibroker.broker import Broker
from minibroker.config import BrokerConfig
from minibroker.server import DirectSocketIO, serve_connection
from minibroker.protocol.messages import decode_response
from tests.support.batches import make_batch
from tests.support.wire import encode_request, produce_request


def _produce_frame(topic: str, correlation_id: int) -> bytes:
    return encode_request(produce_request(topic, make_batch([(None, b"v")]), acks=1), correlation_id)


async def _read_frame(stream: trio.SocketStream, buffer: bytearray) -> bytes:
    while len(buffer) < 4 or len(buffer) < 4 + struct.unpack(">i", buffer[:4])[0]:
        chunk = await stream.receive_some(1 << 16)
        assert chunk, "the broker closed the connection"
        buffer += chunk
    size = struct.unpack(">i", buffer[:4])[0]
    frame = bytes(buffer[4 : 4 + size])
    del buffer[: 4 + size]
    return frame


def test_a_client_that_always_has_its_next_request_ready_does_not_starve_the_others(tmp_path):
    """A connection whose 300 pipelined Produce requests are all in its socket never has to wait for
    a read, and its responses fit the socket's buffer: without a yield per request its loop would
    append all 300 before another connection's loop ran. The other connection's one Produce,
    started after the first connection's loop, is appended among the first few."""
    broker = Broker(BrokerConfig({"log.dirs": str(tmp_path / "d"), "listeners": "127.0.0.1:0"}))
    broker.logs.create_topic("fair", 1, {}, 0)
    busy_requests = 300

    async def main():
        busy_client, busy_server = (trio.SocketStream(s) for s in trio.socket.socketpair())
        other_client, other_server = (trio.SocketStream(s) for s in trio.socket.socketpair())
        await busy_client.send_all(b"".join(_produce_frame("fair", i) for i in range(busy_requests)))
        await other_client.send_all(_produce_frame("fair", 7))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_connection, broker, busy_server, broker.new_connection("busy"))
            await trio.lowlevel.checkpoint()  # the busy loop runs first
            nursery.start_soon(serve_connection, broker, other_server, broker.new_connection("other"))
            buffer = bytearray()
            _, response = decode_response(0, 9, await _read_frame(other_client, buffer))
            offset = response.responses[0].partition_responses[0].base_offset
            busy_buffer = bytearray()
            offsets = []
            for _ in range(busy_requests):
                _, busy = decode_response(0, 9, await _read_frame(busy_client, busy_buffer))
                offsets.append(busy.responses[0].partition_responses[0].base_offset)
            nursery.cancel_scope.cancel()
        for stream in (busy_client, busy_server, other_client, other_server):
            await stream.aclose()
        assert 0 < offset < 10, f"the other connection's request was appended at {offset}"
        assert sorted(offsets + [offset]) == list(range(busy_requests + 1))

    trio.run(main)
    broker.close()


def test_reads_wait_for_bytes_and_writes_go_out_whole():
    """A read with nothing to read waits (and yields) until bytes arrive; a read after the peer
    closed is empty; a write larger than the socket's buffer goes out whole while the peer reads."""

    async def main():
        near, far = trio.socket.socketpair()
        io = DirectSocketIO(near.fileno())
        async with trio.open_nursery() as nursery:
            async def later():
                await trio.sleep(0.01)
                await far.send(b"hello")
            nursery.start_soon(later)
            assert await io.recv(100) == b"hello"
            assert io.waited
        await io.checkpoint()
        assert not io.waited  # reset for the next request

        data = os.urandom(4 << 20)  # more than a socketpair buffers: the write must wait for the reader
        received = bytearray()

        async def reader():
            while len(received) < len(data):
                received.extend(await far.recv(1 << 20))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            await io.send_all(data)
        assert received == data and io.waited

        target = bytearray(10)
        await far.send(b"abc")
        assert await io.recv_into(memoryview(target)) == 3 and target[:3] == b"abc"
        far.close()
        assert await io.recv(10) == b""
        near.close()

    trio.run(main)


def test_socket_errors_are_trio_broken_resource_errors_and_resets_stay_connection_errors(tmp_path):
    """An error on the descriptor that is not a closed connection reaches the loop as trio's
    BrokenResourceError (as trio's calls raise it), never as an OSError the loop would take for a
    storage fault; a reset by the peer stays a ConnectionError."""

    async def main():
        fd = os.open(tmp_path, os.O_RDONLY)  # reading a directory: EISDIR
        try:
            with pytest.raises(trio.BrokenResourceError, match="socket error"):
                await DirectSocketIO(fd).recv(10)
        finally:
            os.close(fd)
        near, far = trio.socket.socketpair()
        await near.send(b"unread")
        far.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        far.close()
        with pytest.raises(ConnectionError):
            await DirectSocketIO(near.fileno()).send_all(b"x" * 100)
        near.close()
        far.close()

    trio.run(main)
