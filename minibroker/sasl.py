"""SASL on the server side: PLAIN (RFC 4616), SCRAM-SHA-256/512 (RFC 5802, RFC 7677) and, in
minibroker.oauthbearer, OAUTHBEARER (RFC 7628).

Follows Kafka's `SaslServerAuthenticator`, `PlainSaslServer` and `ScramSaslServer` (clients/.../security/).
Pure: no I/O, no clock; the SaslHandshake and SaslAuthenticate handlers drive a `SaslSession` per
connection, and `Broker.handle_frame` lets nothing else through until it is complete (which APIs may
come before that is registered with each handler: minibroker.handlers.SaslPhase).

Flow on a SASL_PLAINTEXT or SASL_SSL listener (SaslHandshake v1, so every token travels in a
SaslAuthenticate request): ApiVersions (optional) -> SaslHandshake(mechanism) -> SaslAuthenticate ...
until complete. Any other request before that closes the connection, as Kafka's
IllegalSaslStateException does. A failure answers SASL_AUTHENTICATION_FAILED with Kafka's message,
then the connection is closed.

KIP-368 re-authentication: when the listener's connections.max.reauth.ms for the mechanism is set, or
the credential expires (an OAUTHBEARER token), the final SaslAuthenticate response carries the
session's lifetime (the smaller of the two). The client re-authenticates on the same connection with
a new SaslHandshake and SaslAuthenticate exchange, of the same mechanism and for the same principal,
at most once a second; a connection whose session has expired is closed at its next request
(`session_lifetime_ms` below is the arithmetic; the handlers and Broker.handle_frame keep the rules).
SaslHandshake v0 (raw tokens without Kafka framing) is not served: none of the clients in the suite
sends it (kafka-python, librdkafka and aiokafka all use v1), so ApiVersions advertises v1 only.

SCRAM credentials are derived once at start from `sasl.users` (a random salt, 4096 iterations, as
Kafka's minimum for both hashes); the passwords stay in memory for PLAIN. AlterUserScramCredentials
adds and removes SCRAM credentials while the broker runs (minibroker.scram_credentials keeps them). Usernames are compared as
given (no SASLprep, as Kafka's ScramFormatter).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Callable, Mapping

from minibroker.oauthbearer import OAuthBearerFailure, OAuthBearerServer

__all__ = [
    "DEFAULT_ITERATIONS",
    "PlainServer",
    "SaslAuthenticationFailed",
    "SaslSession",
    "ScramCredential",
    "ScramServer",
    "UserStore",
    "session_lifetime_ms",
]

DEFAULT_ITERATIONS = 4096
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class SaslAuthenticationFailed(Exception):
    """The client failed to authenticate; the message goes to the client (Kafka's wording)."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def derive(cls, mechanism: str, password: str, salt: bytes, iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
        """RFC 5802 section 3: SaltedPassword = Hi(password, salt, i), then the client and server keys."""
        salted = hashlib.pbkdf2_hmac(_HASHES[mechanism], password.encode(), salt, iterations)
        return cls.from_salted_password(mechanism, salted, salt, iterations)

    @classmethod
    def from_salted_password(cls, mechanism: str, salted_password: bytes, salt: bytes, iterations: int) -> ScramCredential:
        """The stored and server keys from SaltedPassword, which is what AlterUserScramCredentials
        carries (the password itself never reaches the broker): Kafka's ScramFormatter."""
        name = _HASHES[mechanism]
        client_key = hmac.digest(salted_password, b"Client Key", name)
        return cls(
            salt,
            iterations,
            hashlib.new(name, client_key).digest(),
            hmac.digest(salted_password, b"Server Key", name),
        )


class UserStore:
    """Users from `sasl.users`: passwords for PLAIN, SCRAM credentials per enabled SCRAM mechanism."""

    def __init__(
        self,
        users: Mapping[str, str],
        mechanisms: tuple[str, ...],
        *,
        iterations: int = DEFAULT_ITERATIONS,
        random_bytes: Callable[[int], bytes] = os.urandom,
    ) -> None:
        self.mechanisms = mechanisms
        self._passwords = dict(users)
        self._scram: dict[tuple[str, str], ScramCredential] = {
            (mechanism, name): ScramCredential.derive(mechanism, password, random_bytes(16), iterations)
            for mechanism in mechanisms
            if mechanism in _HASHES
            for name, password in users.items()
        }

    def __len__(self) -> int:
        return len(self._passwords)

    def check_password(self, user: str, password: str) -> bool:
        expected = self._passwords.get(user)
        # Compare even for an unknown user so the answer takes the same time either way.
        ok = hmac.compare_digest((expected or "\0").encode(), password.encode())
        return expected is not None and ok

    def scram_credential(self, mechanism: str, user: str) -> ScramCredential | None:
        return self._scram.get((mechanism, user))

    def scram_credentials(self) -> dict[tuple[str, str], ScramCredential]:
        """Every SCRAM credential, by (mechanism, user)."""
        return dict(self._scram)

    def set_scram_credential(self, mechanism: str, user: str, credential: ScramCredential) -> None:
        """Create or replace a user's credential for one mechanism (AlterUserScramCredentials); the
        next authentication uses it."""
        self._scram[(mechanism, user)] = credential

    def remove_scram_credential(self, mechanism: str, user: str) -> bool:
        return self._scram.pop((mechanism, user), None) is not None

    def new_server(self, mechanism: str) -> PlainServer | ScramServer:
        if mechanism == "PLAIN":
            return PlainServer(self)
        return ScramServer(mechanism, lambda user: self.scram_credential(mechanism, user))


class PlainServer:
    """RFC 4616: one message, authzid NUL authcid NUL passwd (Kafka's PlainSaslServer). `listener_users`:
    the listener's own users (user_NAME options of its PLAIN JAAS config), checked before sasl.users."""

    mechanism = "PLAIN"
    credential_expiry_ms: int | None = None  # a password does not expire

    def __init__(self, users: UserStore, listener_users: Mapping[str, str] | None = None) -> None:
        self.users = users
        self.listener_users = listener_users or {}
        self.complete = False
        self.authorization_id: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslAuthenticationFailed("Authentication failed: unexpected token after completion")
        try:
            text = token.decode()
        except UnicodeDecodeError:
            raise SaslAuthenticationFailed(_generic("PLAIN")) from None
        parts = text.split("\0")
        if len(parts) != 3:
            # Kafka: SaslException "Invalid SASL/PLAIN response", answered with the generic message.
            raise SaslAuthenticationFailed(_generic("PLAIN"))
        authzid, user, password = parts
        if not user:
            raise SaslAuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationFailed("Authentication failed: password not specified")
        own = self.listener_users.get(user)
        if own is not None:
            ok = hmac.compare_digest(own.encode(), password.encode())
        else:
            ok = self.users.check_password(user, password)
        if not ok:
            raise SaslAuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self.complete = True
        self.authorization_id = user
        return b""


def _generic(mechanism: str) -> str:
    # SaslServerAuthenticator never tells an unauthenticated client more than this.
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ValueError(f"invalid SCRAM attribute {part!r}")
        out.setdefault(part[0], part[2:])
    return out


def _required(attributes: dict[str, str], name: str) -> str:
    """A mandatory attribute (n=, r=, c=): its absence is a malformed message, never a KeyError."""
    value = attributes.get(name)
    if value is None:
        raise ValueError(f"SCRAM message without {name}=")
    return value


def _sasl_name_to_user(name: str) -> str:
    """RFC 5802 saslname: ',' and '=' travel as '=2C' and '=3D'; any other '=' is an error."""
    user = name.replace("=2C", ",").replace("=3D", "=")
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise ValueError("invalid username encoding")
    return user


class ScramServer:
    """RFC 5802 server: client-first -> server-first -> client-final -> server-final."""

    credential_expiry_ms: int | None = None

    def __init__(
        self,
        mechanism: str,
        credentials: Callable[[str], ScramCredential | None],
        *,
        nonce: Callable[[], str] | None = None,
    ) -> None:
        self.mechanism = mechanism
        self._hash = _HASHES[mechanism]
        self._credentials = credentials
        self._nonce = nonce or (lambda: base64.b64encode(os.urandom(18)).decode())
        self._state = "client-first"
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._gs2_header = ""
        self._nonce_value = ""
        self.complete = False
        self.authorization_id: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        """The answer to one client message. Whatever the bytes, the only exception is
        SaslAuthenticationFailed: a malformed message fails as a wrong password does (Kafka's
        SaslException, answered with the generic message), never as a bug."""
        try:
            if self._state == "client-first":
                return self._client_first(token.decode())
            if self._state == "client-final":
                return self._client_final(token.decode())
        except ValueError:  # UnicodeDecodeError and binascii.Error (bad base64) included
            self._state = "failed"
            raise SaslAuthenticationFailed(_generic(self.mechanism)) from None
        except SaslAuthenticationFailed:
            self._state = "failed"
            raise
        raise SaslAuthenticationFailed(_generic(self.mechanism))

    def _client_first(self, message: str) -> bytes:
        # gs2-header: cbind flag ("n" or "y": no channel binding; "p=" would need TLS), authzid.
        flag, sep, rest = message.partition(",")
        if not sep or flag not in ("n", "y"):
            raise ValueError("channel binding is not supported")
        authzid_part, sep, bare = rest.partition(",")
        if not sep:
            raise ValueError("truncated client-first message")
        if authzid_part and not authzid_part.startswith("a="):
            raise ValueError("invalid authzid")
        attributes = _attributes(bare)
        if "m" in attributes:
            raise ValueError("mandatory extension not supported")
        user = _sasl_name_to_user(_required(attributes, "n"))
        client_nonce = _required(attributes, "r")
        if not client_nonce:
            raise ValueError("empty nonce")
        credential = self._credentials(user)
        if credential is None:
            raise ValueError("unknown user")
        authzid = _sasl_name_to_user(authzid_part[2:]) if authzid_part else ""
        if authzid and authzid != user:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self._credential = credential
        self._gs2_header = f"{flag},{authzid_part},"
        self._client_first_bare = bare
        self._nonce_value = client_nonce + self._nonce()
        self._server_first = (
            f"r={self._nonce_value},s={base64.b64encode(credential.salt).decode()},i={credential.iterations}"
        )
        self.authorization_id = user
        self._state = "client-final"
        return self._server_first.encode()

    def _client_final(self, message: str) -> bytes:
        without_proof, sep, proof_part = message.rpartition(",p=")
        if not sep:
            raise ValueError("client-final message has no proof")
        attributes = _attributes(without_proof)
        if base64.b64decode(_required(attributes, "c"), validate=True) != self._gs2_header.encode():
            raise ValueError("channel binding mismatch")
        if _required(attributes, "r") != self._nonce_value:
            raise ValueError("Invalid client nonce in the final client message.")
        proof = base64.b64decode(proof_part, validate=True)
        credential = self._credential
        assert credential is not None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_signature = hmac.digest(credential.stored_key, auth_message, self._hash)
        if len(proof) != len(client_signature):
            raise ValueError("invalid proof length")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), credential.stored_key):
            raise ValueError("Invalid client credentials")
        server_signature = hmac.digest(credential.server_key, auth_message, self._hash)
        self._state = "complete"
        self.complete = True
        return b"v=" + base64.b64encode(server_signature)


class SaslSession:
    """One connection's authentication after its SaslHandshake: the mechanism's server and its state.
    `previous`: during a re-authentication (KIP-368), the (mechanism, principal) authenticated before."""

    def __init__(self, mechanism: str, server: PlainServer | ScramServer | OAuthBearerServer,
                 previous: tuple[str, str] | None = None) -> None:
        self.mechanism = mechanism
        self.server = server
        self.previous = previous

    @property
    def reauthenticating(self) -> bool:
        return self.previous is not None

    @property
    def complete(self) -> bool:
        return self.server.complete

    @property
    def user(self) -> str | None:
        return self.server.authorization_id if self.server.complete else None

    def evaluate(self, token: bytes) -> bytes:
        """The server's answer to one client token; raises SaslAuthenticationFailed. A
        re-authentication that names another principal fails (Kafka's ensurePrincipalUnchanged)."""
        try:
            answer = self.server.evaluate(token)
        except OAuthBearerFailure as exc:
            raise SaslAuthenticationFailed(str(exc)) from None
        if self.previous is not None and self.server.complete:
            before = self.previous[1].split(":", 1)
            now = self.user or ""
            if before[1] != now:
                raise SaslAuthenticationFailed(
                    f"Cannot change principals during re-authentication from {before[0]}.{before[1]}: User.{now}")
        return answer


def session_lifetime_ms(max_reauth_ms: int, credential_expiry_ms: int | None, now_ms: int) -> int | None:
    """KIP-368: how long a session that completed at `now_ms` lasts (SaslServerAuthenticator's
    calcCompletionTimesAndReturnSessionLifetimeMs): the smaller of connections.max.reauth.ms (when
    positive) and the time to the credential's expiry, never negative; None when neither applies
    (the session never expires, and SaslAuthenticate answers 0)."""
    limits = []
    if max_reauth_ms > 0:
        limits.append(max_reauth_ms)
    if credential_expiry_ms is not None:
        limits.append(credential_expiry_ms - now_ms)
    return max(0, min(limits)) if limits else None


class ScramClient:
    """RFC 5802 client side, for `minibroker configs` on a SASL listener (and the tests)."""

    def __init__(self, mechanism: str, user: str, password: str, *, nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._hash = _HASHES[mechanism]
        self.user = user
        self.password = password
        self.nonce = nonce or base64.b64encode(os.urandom(18)).decode()
        self._client_first_bare = ""
        self._server_signature = b""

    def first_message(self) -> bytes:
        name = self.user.replace("=", "=3D").replace(",", "=2C")
        self._client_first_bare = f"n={name},r={self.nonce}"
        return f"n,,{self._client_first_bare}".encode()

    def final_message(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        attributes = _attributes(text)
        nonce, salt, iterations = attributes["r"], base64.b64decode(attributes["s"]), int(attributes["i"])
        if not nonce.startswith(self.nonce):
            raise SaslAuthenticationFailed("server nonce does not extend the client nonce")
        salted = hashlib.pbkdf2_hmac(self._hash, self.password.encode(), salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", self._hash)
        stored_key = hashlib.new(self._hash, client_key).digest()
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        signature = hmac.digest(stored_key, auth_message, self._hash)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        server_key = hmac.digest(salted, b"Server Key", self._hash)
        self._server_signature = hmac.digest(server_key, auth_message, self._hash)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        attributes = _attributes(server_final.decode())
        if "e" in attributes:
            raise SaslAuthenticationFailed(f"server error: {attributes['e']}")
        if not hmac.compare_digest(base64.b64decode(attributes.get("v", "")), self._server_signature):
            raise SaslAuthenticationFailed("the server's signature does not verify")
