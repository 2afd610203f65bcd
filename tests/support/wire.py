"""A minimal blocking Kafka wire client for tests: kio schemas over a plain socket; and the requests
tests send most, one helper each: `request` (a kio request from fields), `create_topic` /
`create_topics`, `produce`.

Used where a test must control the exact bytes (bad input, exact versions, long polls) rather than
go through a client library. The helpers take a `WireClient` or a minibroker.admin_client.AdminClient
(both have `call(api_key, body, version)`).
"""

from __future__ import annotations

import socket
import struct

from kio.index import load_request_schema

from minibroker.admin_client import AdminClient
from minibroker.protocol.entities import build
from minibroker.protocol.messages import decode_response
from minibroker.protocol.messages import encode_request as protocol_encode_request
import datetime


ms = lambda n: datetime.timedelta(milliseconds=n)  # noqa: E731


def encode_request(request, correlation_id: int = 1, client_id: str = "wire-test") -> bytes:
    return protocol_encode_request(request, correlation_id, client_id)


class WireClient:
    def __init__(self, bootstrap: str, timeout: float = 30.0, ssl_context=None, server_hostname: str | None = None) -> None:
        """`ssl_context`: talk TLS (an SSL or SASL_SSL listener), checking the name `server_hostname`
        (the bootstrap's host by default) when the context checks names."""
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        if ssl_context is not None:
            try:
                self.sock = ssl_context.wrap_socket(self.sock, server_hostname=server_hostname or host)
            except BaseException:
                self.sock.close()
                raise
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

    def call(self, api_key: int, body: dict, version: int):
        """A request given as fields (minibroker.protocol.entities.build), as AdminClient.call."""
        return self.request(build(schema(api_key, version), body))


def schema(api_key: int, version: int):
    return load_request_schema(api_key, version)


def request(api_key: int, version: int, **fields):
    """A kio request of `api_key` at `version` from its fields."""
    return build(schema(api_key, version), fields)


def _produce_fields(topic: str, records: bytes, acks: int, partition: int, transactional_id: str | None) -> dict:
    return {"transactional_id": transactional_id, "acks": acks, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]}


def produce_request(topic: str, records: bytes, version: int = 9, acks: int = -1, partition: int = 0,
                    transactional_id: str | None = None):
    """A kio ProduceRequest of `records` (a batch) to one partition of `topic` (frames: encode_request)."""
    return request(0, version, **_produce_fields(topic, records, acks, partition, transactional_id))


def produce(client, topic: str, records: bytes, version: int = 9, acks: int = -1, partition: int = 0,
            transactional_id: str | None = None):
    """One Produce of `records` (a batch) to one partition of `topic`; the response (acks=0 gets none:
    not for this helper)."""
    return client.call(0, _produce_fields(topic, records, acks, partition, transactional_id), version=version)


def produced(client, topic: str, records: bytes, **kwargs):
    """`produce`'s answer for its one partition (error_code, base_offset, ...)."""
    return produce(client, topic, records, **kwargs).responses[0].partition_responses[0]


def create_topics(target, names, partitions: int = 1, configs: dict[str, str] | None = None,
                  per_request: int = 50) -> None:
    """Create topics (replication factor 1, `configs` on each) through minibroker's AdminClient,
    `target` being one or a bootstrap address; each must be answered NONE."""
    if isinstance(target, str):
        with AdminClient(target) as admin:
            create_topics(admin, names, partitions, configs, per_request)
        return
    names = list(names)
    for start in range(0, len(names), per_request):
        response = target.call(19, {"topics": [
            {"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
             "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}
            for name in names[start:start + per_request]], "timeout": 60000, "validate_only": False}, version=7)
        for topic in response.topics:
            assert topic.error_code == 0, (topic.name, topic.error_code, topic.error_message)


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
