"""A minimal blocking Kafka wire client for tests: kio schemas over a plain socket.

Used where a test must control the exact bytes (bad input, exact versions, long polls) rather than
go through a client library.
"""

from __future__ import annotations

import io
import socket
import struct

from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32


def encode_request(request, correlation_id: int = 1, client_id: str = "wire-test") -> bytes:
    header_cls = RequestHeaderV2 if request.__flexible__ else RequestHeaderV1
    header = header_cls(
        request_api_key=i16(request.__api_key__),
        request_api_version=i16(request.__version__),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header)
    entity_writer(type(request))(buf, request)
    body = buf.getvalue()
    return struct.pack(">i", len(body)) + body


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

    def request(self, request, flexible_response_header: bool | None = None):
        """Send a kio request, return the decoded kio response."""
        self.correlation_id += 1
        self.send_raw(encode_request(request, self.correlation_id))
        frame = self.recv_frame()
        (correlation_id,) = struct.unpack_from(">i", frame, 0)
        assert correlation_id == self.correlation_id
        response_cls = load_response_schema(request.__api_key__, request.__version__)
        offset = 4
        flexible = response_cls.__flexible__ if flexible_response_header is None else flexible_response_header
        if flexible and request.__api_key__ != 18:
            offset += 1  # empty tagged fields of response header v1
        response, size = entity_reader(response_cls)(frame, offset)
        assert offset + size == len(frame), "response has trailing bytes"
        return response


def schema(api_key: int, version: int):
    return load_request_schema(api_key, version)
