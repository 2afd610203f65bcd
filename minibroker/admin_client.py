"""A tiny blocking Kafka client for the command line (`minibroker configs`): kio schemas over a socket.

One connection, one request at a time. It asks ApiVersions first and sends each request at the
highest version both sides have; on a SASL_PLAINTEXT listener it authenticates with PLAIN or
SCRAM-SHA-256/512 (SaslHandshake v1, then SaslAuthenticate). Errors are `AdminClientError` with a
message fit for a user.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from kio.index import load_request_schema

from minibroker.sasl import ScramClient, SaslAuthenticationFailed
from minibroker.protocol.entities import build
from minibroker.protocol.messages import ProtocolError, decode_response, encode_request, kio_versions

__all__ = ["AdminClient", "AdminClientError"]

_SIZE = struct.Struct(">i")


class AdminClientError(Exception):
    pass


class AdminClient:
    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str = "minibroker-admin",
        timeout: float = 30.0,
        sasl_mechanism: str | None = None,
        sasl_username: str | None = None,
        sasl_password: str | None = None,
    ) -> None:
        host, sep, port = bootstrap.strip().rpartition(":")
        if not sep or not port.isdigit():
            raise AdminClientError(f"--bootstrap-server must be HOST:PORT, got {bootstrap!r}")
        try:
            self.sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
        except OSError as exc:
            raise AdminClientError(f"cannot connect to {bootstrap}: {exc.strerror or exc}") from None
        self.bootstrap = bootstrap
        self.client_id = client_id
        self._correlation_id = 0
        try:
            self.versions = self._api_versions()
            if sasl_mechanism:
                self._authenticate(sasl_mechanism, sasl_username or "", sasl_password or "")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- requests --------------------------------------------------------------------------------

    def version_for(self, api_key: int) -> int:
        theirs = self.versions.get(api_key)
        ours = kio_versions(api_key)
        if theirs is None or ours is None or max(theirs[0], ours[0]) > min(theirs[1], ours[1]):
            raise AdminClientError(f"the broker at {self.bootstrap} does not support API key {api_key}")
        return min(theirs[1], ours[1])

    def call(self, api_key: int, body: dict[str, Any], version: int | None = None) -> Any:
        """Send a request described as a dict (see minibroker.protocol.entities.build); return the kio response."""
        version = self.version_for(api_key) if version is None else version
        request = build(load_request_schema(api_key, version), body)
        return self._roundtrip(request)

    def _roundtrip(self, request: Any) -> Any:
        self._correlation_id += 1
        try:
            self.sock.sendall(encode_request(request, self._correlation_id, self.client_id))
            (size,) = _SIZE.unpack(self._recv(4))
            frame = self._recv(size)
        except (OSError, ConnectionError) as exc:
            raise AdminClientError(f"lost the connection to {self.bootstrap}: {exc}") from None
        try:
            correlation_id, response = decode_response(request.__api_key__, request.__version__, frame)
        except ProtocolError as exc:
            raise AdminClientError(str(exc)) from None
        if correlation_id != self._correlation_id:
            raise AdminClientError("response out of order")
        return response

    def _recv(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _api_versions(self) -> dict[int, tuple[int, int]]:
        response = self._roundtrip(build(load_request_schema(18, 0), {}))
        if response.error_code != 0:
            raise AdminClientError(f"ApiVersions failed with error {int(response.error_code)}")
        return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}

    # ---- SASL ----------------------------------------------------------------------------------------

    def _authenticate(self, mechanism: str, username: str, password: str) -> None:
        mechanism = mechanism.upper()
        handshake = self.call(17, {"mechanism": mechanism})
        if handshake.error_code != 0:
            raise AdminClientError(
                f"SASL mechanism {mechanism} refused (error {int(handshake.error_code)}); "
                f"the broker offers {', '.join(handshake.mechanisms) or 'none'}"
            )
        if mechanism == "PLAIN":
            self._sasl_token(f"\0{username}\0{password}".encode())
            return
        if not mechanism.startswith("SCRAM-"):
            raise AdminClientError(f"unsupported SASL mechanism {mechanism}")
        client = ScramClient(mechanism, username, password)
        server_first = self._sasl_token(client.first_message())
        server_final = self._sasl_token(client.final_message(server_first))
        try:
            client.verify_server_final(server_final)
        except SaslAuthenticationFailed as exc:
            raise AdminClientError(str(exc)) from None

    def _sasl_token(self, token: bytes) -> bytes:
        response = self.call(36, {"auth_bytes": token})
        if response.error_code != 0:
            raise AdminClientError(response.error_message or f"SASL authentication failed ({int(response.error_code)})")
        return bytes(response.auth_bytes)
