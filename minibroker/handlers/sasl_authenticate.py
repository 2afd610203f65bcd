"""SaslAuthenticate (key 36), v0-v2: one SASL token from the client, the server's token back.

Behaviour (Kafka's SaslServerAuthenticator): tokens go to the mechanism chosen by SaslHandshake
(PLAIN, SCRAM-SHA-256/512; see minibroker.sasl). When the exchange completes the connection's
principal becomes `User:<name>` and every API is served. A failure is answered
SASL_AUTHENTICATION_FAILED (58) with Kafka's message, then the connection is closed. A
SaslAuthenticate on a PLAINTEXT listener or after authentication is answered ILLEGAL_SASL_STATE (34);
one before any handshake never reaches here (Broker.handle_frame closes the connection).
session_lifetime is 0: no re-authentication (KIP-368 off, Kafka's default).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.handlers import Reply, SaslPhase, handler
from minibroker.sasl import SaslAuthenticationFailed
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(36, 0, 2, sasl_phase=SaslPhase.AUTHENTICATE)
async def sasl_authenticate(ctx: RequestContext, request: Any) -> Reply:
    conn = ctx.connection
    if conn.authenticated or conn.sasl is None:
        return _answer(ErrorCode.illegal_sasl_state, "SaslAuthenticate request received after successful authentication")
    try:
        token = conn.sasl.evaluate(bytes(request.auth_bytes))
    except SaslAuthenticationFailed as exc:
        ctx.close_connection = True
        return _answer(ErrorCode.sasl_authentication_failed, str(exc))
    if conn.sasl.complete:
        conn.principal = f"User:{conn.sasl.user}"
        conn.authenticated = True
    return _answer(ErrorCode.none, None, token)


def _answer(code: ErrorCode, message: str | None, token: bytes = b"") -> Reply:
    return Reply({"error_code": code, "error_message": message, "auth_bytes": token, "session_lifetime": 0})
