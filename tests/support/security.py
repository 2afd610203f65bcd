"""Helpers of the security tests: an authorizer that allows everything and records who asked (so a
test sees the principal a listener gave a connection), and the SASL exchanges over a WireClient."""

from __future__ import annotations

import threading

from minibroker.oauthbearer import client_initial_response
from minibroker.protocol.entities import build
from minibroker.sasl import ScramClient
from tests.support.wire import schema

PRINCIPAL_RECORDER = "tests.support.security:PrincipalRecorder"


class PrincipalRecorder:
    """authorizer.class.name=tests.support.security:PrincipalRecorder: allows every action and keeps
    (principal, listener) of each (`seen`)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    def authorize(self, principal, listener, host, operation, resource_type, name, log_if_denied=True) -> bool:
        with self._lock:
            self.seen.append((principal, listener))
        return True

    def principals(self, listener: str) -> set[str]:
        with self._lock:
            return {principal for principal, on in self.seen if on == listener}

    def clear(self) -> None:
        with self._lock:
            self.seen.clear()


def metadata(client, version: int = 12):
    """A Metadata request for every topic (the authorizer is asked DESCRIBE for each)."""
    return client.request(build(schema(3, version), {
        "topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}))


def handshake(client, mechanism: str):
    return client.request(schema(17, 1)(mechanism=mechanism))


def authenticate(client, token: bytes, version: int = 2):
    return client.request(schema(36, version)(auth_bytes=token))


def plain_login(client, user: str, password: str, version: int = 2):
    assert handshake(client, "PLAIN").error_code == 0
    return authenticate(client, f"\0{user}\0{password}".encode(), version)


def scram_login(client, mechanism: str, user: str, password: str, version: int = 2):
    assert handshake(client, mechanism).error_code == 0
    scram = ScramClient(mechanism, user, password)
    first = authenticate(client, scram.first_message(), version)
    if first.error_code:
        return first
    final = authenticate(client, scram.final_message(bytes(first.auth_bytes)), version)
    if not final.error_code:
        scram.verify_server_final(bytes(final.auth_bytes))
    return final


def oauth_login(client, token: str, version: int = 2, authorization_id: str = ""):
    """OAUTHBEARER: the token; an error challenge is answered 0x01 as Kafka's client answers it, and
    that last response returned."""
    assert handshake(client, "OAUTHBEARER").error_code == 0
    answer = authenticate(client, client_initial_response(token, authorization_id), version)
    if answer.error_code == 0 and bytes(answer.auth_bytes):
        return authenticate(client, b"\x01", version)
    return answer
