"""A tiny blocking Kafka client for the command line (`minibroker configs`, `topics`, `acls`): kio
schemas over a socket.

One connection, one request at a time. It asks ApiVersions first and sends each request at the
highest version both sides have. Over TLS (SSL, SASL_SSL) it checks the broker's certificate against
the truststore given and, with ssl.endpoint.identification.algorithm=https (Kafka's default), its
name; with a keystore it presents a client certificate. On a SASL listener it authenticates with
PLAIN, SCRAM-SHA-256/512 or OAUTHBEARER (an unsecured token, as Kafka's
OAuthBearerUnsecuredLoginCallbackHandler makes) (SaslHandshake v1, then SaslAuthenticate).
`command_config` reads Kafka's client properties (a --command-config file) into AdminClient's
arguments. Errors are `AdminClientError` with a message fit for a user.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from pathlib import Path
from typing import Any, Mapping

from kio.index import load_request_schema

from minibroker.oauthbearer import client_initial_response, unsecured_token
from minibroker.sasl import ScramClient, SaslAuthenticationFailed
from minibroker.protocol.entities import build
from minibroker.protocol.messages import ProtocolError, decode_response, encode_request, kio_versions

__all__ = ["AdminClient", "AdminClientError", "client_settings", "command_config"]

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
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """`ssl_context`: TLS (SSL, SASL_SSL), as `command_config` builds it; `sasl_mechanism` with
        the user's name and password (OAUTHBEARER: the password is the token)."""
        host, sep, port = bootstrap.strip().rpartition(":")
        if not sep or not port.isdigit():
            raise AdminClientError(f"--bootstrap-server must be HOST:PORT, got {bootstrap!r}")
        try:
            self.sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
        except OSError as exc:
            raise AdminClientError(f"cannot connect to {bootstrap}: {exc.strerror or exc}") from None
        if ssl_context is not None:
            try:
                self.sock = ssl_context.wrap_socket(self.sock, server_hostname=host.strip("[]"))
            except (ssl.SSLError, OSError) as exc:
                self.sock.close()
                reason = getattr(exc, "verify_message", None) or getattr(exc, "reason", None) or exc
                raise AdminClientError(f"TLS handshake with {bootstrap} failed: {reason}") from None
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
        if mechanism == "OAUTHBEARER":
            answer = self._sasl_token(client_initial_response(password))
            if answer:  # an error challenge: Kafka's client answers 0x01 and the exchange fails
                self._sasl_token(b"\x01")
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


# ---- Kafka's client properties -------------------------------------------------------------------


def command_config(path: Path | None) -> dict[str, Any]:
    """AdminClient's keyword arguments from a --command-config file (Kafka's client properties)."""
    if path is None:
        return {}
    from minibroker.config import parse_properties

    try:
        props = parse_properties(path.read_text(), str(path))
    except OSError as exc:
        raise AdminClientError(f"cannot read --command-config {path}: {exc.strerror}") from None
    return client_settings(props)


def client_settings(props: Mapping[str, str]) -> dict[str, Any]:
    """AdminClient's keyword arguments from client properties: security.protocol, ssl.* (PEM or
    PKCS12 truststore and keystore, ssl.endpoint.identification.algorithm), sasl.mechanism with
    sasl.username/sasl.password or sasl.jaas.config (username="..." password="..."; OAUTHBEARER:
    unsecuredLoginStringClaim_sub="..." and unsecuredLoginLifetimeSeconds, as Kafka's unsecured
    login)."""
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise AdminClientError(f"security.protocol {protocol} is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL")
    settings: dict[str, Any] = {}
    if protocol.endswith("SSL"):
        settings["ssl_context"] = _ssl_context(props)
    if protocol.startswith("SASL_"):
        mechanism = props.get("sasl.mechanism", "GSSAPI").upper()
        options = _jaas_options(props.get("sasl.jaas.config", ""))
        if mechanism == "OAUTHBEARER":
            subject = options.get("unsecuredLoginStringClaim_sub")
            if not subject:
                raise AdminClientError('OAUTHBEARER needs sasl.jaas.config=org.apache.kafka.common.security.'
                                       'oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="...";')
            lifetime = int(options.get("unsecuredLoginLifetimeSeconds", "3600"))
            token = unsecured_token(subject, now_ms=int(time.time() * 1000), lifetime_ms=lifetime * 1000)
            return {**settings, "sasl_mechanism": mechanism, "sasl_username": subject, "sasl_password": token}
        if mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            raise AdminClientError(f"sasl.mechanism {mechanism} is not supported (PLAIN, SCRAM-SHA-256, "
                                   "SCRAM-SHA-512, OAUTHBEARER)")
        username = options.get("username", props.get("sasl.username"))
        password = options.get("password", props.get("sasl.password"))
        if not username or password is None:
            raise AdminClientError(f"{protocol} needs sasl.username and sasl.password (or sasl.jaas.config)")
        settings |= {"sasl_mechanism": mechanism, "sasl_username": username, "sasl_password": password}
    return settings


def _jaas_options(text: str) -> dict[str, str]:
    if not text:
        return {}
    from minibroker.jaas import parse_jaas_config

    try:
        config = parse_jaas_config(text)
    except ValueError as exc:
        raise AdminClientError(f"sasl.jaas.config: {exc}") from None
    return dict(config.options) if config else {}


def _ssl_context(props: Mapping[str, str]) -> ssl.SSLContext:
    """A client context: the truststore's CAs (the system's without one), the keystore's certificate
    (mTLS), and the broker's name checked unless ssl.endpoint.identification.algorithm is empty."""
    context = ssl.create_default_context()
    context.check_hostname = props.get("ssl.endpoint.identification.algorithm", "https") != ""
    trusted = _trusted_pem(props)
    if trusted is not None:
        context.load_verify_locations(cadata=trusted)
    chain_and_key = _client_pem(props)
    if chain_and_key is not None:
        import tempfile

        with tempfile.NamedTemporaryFile("wb", suffix=".pem") as pem:
            pem.write(chain_and_key)
            pem.flush()
            try:
                context.load_cert_chain(pem.name, password=props.get("ssl.key.password") or None)
            except ssl.SSLError as exc:
                raise AdminClientError(f"cannot load the client certificate and key: {exc.reason or exc}") from None
    return context


def _read(props: Mapping[str, str], key: str) -> bytes:
    try:
        return Path(props[key]).read_bytes()
    except OSError as exc:
        raise AdminClientError(f"cannot read {key} {props[key]}: {exc.strerror}") from None


def _trusted_pem(props: Mapping[str, str]) -> str | None:
    if props.get("ssl.truststore.certificates"):
        return props["ssl.truststore.certificates"]
    if not props.get("ssl.truststore.location"):
        return None
    data = _read(props, "ssl.truststore.location")
    if b"-----BEGIN" in data[:4096]:
        return data.decode("ascii", "replace")
    from cryptography.hazmat.primitives.serialization import Encoding, pkcs12

    password = props.get("ssl.truststore.password", "")
    try:
        store = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError:
        raise AdminClientError(f"cannot open the truststore {props['ssl.truststore.location']}") from None
    certs = [c.certificate for c in store.additional_certs] + ([store.cert.certificate] if store.cert else [])
    return "".join(c.public_bytes(Encoding.PEM).decode() for c in certs)


def _client_pem(props: Mapping[str, str]) -> bytes | None:
    if props.get("ssl.keystore.certificate.chain") and props.get("ssl.keystore.key"):
        return (props["ssl.keystore.key"] + "\n" + props["ssl.keystore.certificate.chain"]).encode()
    if not props.get("ssl.keystore.location"):
        return None
    data = _read(props, "ssl.keystore.location")
    if b"-----BEGIN" in data[:4096]:
        return data
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, pkcs12

    password = props.get("ssl.keystore.password", "")
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError:
        raise AdminClientError(f"cannot open the keystore {props['ssl.keystore.location']}") from None
    if key is None or cert is None:
        raise AdminClientError(f"{props['ssl.keystore.location']} holds no key and certificate")
    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()) + b"".join(
        c.public_bytes(Encoding.PEM) for c in [cert, *extra])
