"""A minimal blocking Kafka wire client for tests: kio schemas over a plain socket.

Used where a test must control the exact bytes (bad input, exact versions, long polls) rather than
go through a client library.
"""

from __future__ import annotations

import socket
import struct

from kio.index import load_request_schema

from minibroker.protocol.messages import decode_response
from minibroker.protocol.messages import encode_request as protocol_encode_request
import datetime


ms = lambda n: datetime.timedelta(milliseconds=n)  # noqa: E731


def encode_request(request, correlation_id: int = 1, client_id: str = "wire-test") -> bytes:
    return protocol_encode_request(request, correlation_id, client_id)


class WireClient:
    def __init__(self, bootstrap: str, timeout: float = 30.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exact(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionError("connection closed by broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self.recv_exact(4))
        return self.recv_exact(size)

    def is_closed_by_peer(self) -> bool:
        """True once the broker has closed the connection (reads EOF or a reset)."""
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True

    def request(self, request):
        """Send a kio request, return the decoded kio response (trailing bytes are an error)."""
        self.correlation_id += 1
        self.send_raw(encode_request(request, self.correlation_id))
        correlation_id, response = decode_response(request.__api_key__, request.__version__, self.recv_frame())
        assert correlation_id == self.correlation_id
        return response


def schema(api_key: int, version: int):
    return load_request_schema(api_key, version)


def create_topic_with(admin, name: str, partitions: int = 1, configs=()) -> None:
    """CreateTopics through a minibroker.admin_client.AdminClient (configs: (key, value) pairs)."""
    response = admin.call(19, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                            "assignments": [], "configs": [{"name": k, "value": v} for k, v in configs]}],
                               "timeout": 10000, "validate_only": False})
    assert response.topics[0].error_code == 0, response.topics[0].error_message


def api_versions_ok(client) -> bool:
    return client.request(schema(18, 0)()).error_code == 0


def create_topic(client, name, partitions=1, configs=(), version=7):
    req = schema(19, version)
    mod = __import__(req.__module__, fromlist=["CreatableTopic"])
    topic = mod.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1, assignments=(),
                               configs=tuple(mod.CreatableTopicConfig(name=k, value=v) for k, v in configs))
    return client.request(req(topics=(topic,), timeout=ms(5000), validate_only=False)).topics[0]
