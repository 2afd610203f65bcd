"""The reference idempotent producer over a socket: a thin blocking driver for `minibroker.producer.core`.

    from minibroker.producer import IdempotentProducer

    with IdempotentProducer("127.0.0.1:9092") as producer:
        deliveries = [producer.send("orders", 0, b"order %d" % i) for i in range(10_000)]
        producer.flush()
    assert all(d.offset is not None for d in deliveries)

One connection to one broker (the leader of every partition the producer writes to: minibroker,
or any single-broker cluster). The socket is non-blocking and served by a selector, so many
requests are written while responses are read. A request unanswered for `request_timeout_s`, a
closed or reset connection, all end the connection; the core puts its in-flight batches back and
the driver reconnects after `reconnect_backoff_s`. No threads: work happens inside `flush`/`poll`.
"""

from __future__ import annotations

import selectors
import socket
import time

from minibroker.producer.core import Delivery, ProducerCore, ProducerStats

__all__ = ["IdempotentProducer"]

READ_SIZE = 1 << 20


class IdempotentProducer:
    """A lean-producer-state producer (see `minibroker.producer.core`) connected to `bootstrap` (HOST:PORT)."""

    def __init__(self, bootstrap: str, *, client_id: str = "minibroker-producer",
                 max_in_flight_batches: int | None = None, batch_records: int = 100,
                 request_timeout_s: float = 10.0, reconnect_backoff_s: float = 0.05) -> None:
        host, sep, port = bootstrap.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"bootstrap must be HOST:PORT, not {bootstrap!r}")
        self.address = (host.strip("[]"), int(port))
        self.core = ProducerCore(client_id, max_in_flight_batches=max_in_flight_batches,
                                 batch_records=batch_records, timeout_ms=int(request_timeout_s * 1000))
        self.reconnect_backoff_s = reconnect_backoff_s
        self._selector = selectors.DefaultSelector()
        self._sock: socket.socket | None = None
        self._out = bytearray()
        self._reconnect_at = 0.0

    # ---- the API ----------------------------------------------------------------------------------

    def send(self, topic: str, partition: int, value: bytes | None, key: bytes | None = None) -> Delivery:
        """Queue a record (sent by the next `flush` or `poll`)."""
        return self.core.send(topic, partition, value, key, time.time_ns() // 1_000_000)

    def flush(self, timeout_s: float = 120.0) -> None:
        """Work until every queued record is delivered or failed; TimeoutError if that takes longer."""
        deadline = time.monotonic() + timeout_s
        while not self.core.all_done:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"records still undelivered after {timeout_s} s")
            self.poll(min(remaining, 1.0))

    def poll(self, timeout_s: float = 0.0) -> None:
        """One round of I/O: connect if needed, write what may go, read what came (up to timeout_s)."""
        now = time.monotonic()
        if self._sock is None:
            if now < self._reconnect_at:
                time.sleep(min(timeout_s, self._reconnect_at - now))
                return
            self._connect()
            if self._sock is None:
                return
        self._out += self.core.data_to_send(_ms(now))
        timeout = timeout_s
        deadline = self.core.next_deadline_ms(_ms(now))
        if deadline is not None:
            timeout = max(0.0, min(timeout, deadline / 1000 - now))
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if self._out else 0)
        self._selector.modify(self._sock, events)
        try:
            for _key, mask in self._selector.select(timeout):
                if mask & selectors.EVENT_WRITE and self._out:
                    sent = self._sock.send(self._out)
                    del self._out[:sent]
                if mask & selectors.EVENT_READ:
                    data = self._sock.recv(READ_SIZE)
                    if not data:
                        raise ConnectionResetError("the broker closed the connection")
                    self.core.receive_data(data, _ms(time.monotonic()))
        except OSError:
            self._disconnect()
            return
        if self.core.timed_out(_ms(time.monotonic())):
            self._disconnect()

    def close(self) -> None:
        self._drop_socket()
        self._selector.close()

    def __enter__(self) -> IdempotentProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def stats(self) -> ProducerStats:
        return self.core.stats

    @property
    def window(self) -> int | None:
        """The broker's max.in.flight.sequence.number.per.connection, once announced."""
        return self.core.window

    # ---- the connection -------------------------------------------------------------------------

    def _connect(self) -> None:
        try:
            sock = socket.create_connection(self.address, timeout=self.core.timeout_ms / 1000)
        except OSError:
            self._reconnect_at = time.monotonic() + self.reconnect_backoff_s
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        self._selector.register(sock, selectors.EVENT_READ)
        self.core.connection_made(_ms(time.monotonic()))

    def _drop_socket(self) -> None:
        if self._sock is not None:
            self._selector.unregister(self._sock)
            self._sock.close()
            self._sock = None

    def _disconnect(self) -> None:
        self._drop_socket()
        self._out.clear()
        self.core.connection_lost()
        self._reconnect_at = time.monotonic() + self.reconnect_backoff_s


def _ms(seconds: float) -> int:
    return int(seconds * 1000)
