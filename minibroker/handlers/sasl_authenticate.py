"""SaslAuthenticate (key 36), v0-v2: one SASL token from the client, the server's token back.

Behaviour (Kafka's SaslServerAuthenticator): tokens go to the mechanism chosen by SaslHandshake
(PLAIN, SCRAM-SHA-256/512, OAUTHBEARER; see minibroker.sasl and minibroker.oauthbearer). When the
exchange completes the connection's principal becomes `User:<name>` and every API is served. A
failure is answered SASL_AUTHENTICATION_FAILED (58) with Kafka's message, then the connection is
closed. A SaslAuthenticate on a listener without SASL or after authentication is answered
ILLEGAL_SASL_STATE (34); one before any handshake never reaches here (Broker.handle_frame closes the
connection).

KIP-368: the final response's session_lifetime_ms (v1+) is how long the session lasts: the smaller of
the listener's connections.max.reauth.ms for the mechanism and the time left on the credential (an
OAUTHBEARER token's exp); 0 when neither applies. The same exchange re-authenticates a connection
(after a SaslHandshake that began it): same mechanism, same principal, a new session lifetime.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from minibroker.handlers import Reply, SaslPhase, handler
from minibroker.handlers.sasl_handshake import BAD_MECHANISM
from minibroker.sasl import SaslAuthenticationFailed, session_lifetime_ms
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext

log = logging.getLogger(__name__)


@handler(36, 0, 2, sasl_phase=SaslPhase.AUTHENTICATE)
async def sasl_authenticate(ctx: RequestContext, request: Any) -> Reply | None:
    conn = ctx.connection
    session = conn.sasl
    if session is None:
        return _answer(ErrorCode.illegal_sasl_state, "SaslAuthenticate request received after successful authentication")
    if session == BAD_MECHANISM:  # Kafka closes it without an answer
        log.info("closing connection from %s (%s): re-authentication asked for a mechanism other than %s",
                 conn.peer, conn.principal, conn.sasl_mechanism)
        ctx.close_connection = True
        return None
    try:
        token = session.evaluate(bytes(request.auth_bytes))
    except SaslAuthenticationFailed as exc:
        ctx.close_connection = True
        if session.reauthenticating:
            log.info("closing connection from %s (%s): re-authentication failed: %s", conn.peer, conn.principal, exc)
        return _answer(ErrorCode.sasl_authentication_failed, str(exc))
    if not session.complete:
        return _answer(ErrorCode.none, None, token)
    security = conn.security
    reauth_ms = security.reauth_ms.get(session.mechanism, 0) if security is not None else 0
    lifetime = session_lifetime_ms(reauth_ms, session.server.credential_expiry_ms, ctx.clock.now_ms())
    conn.session_expires_at = None if lifetime is None else ctx.clock.monotonic() + lifetime / 1000
    if session.reauthenticating:
        ctx.metrics.successful_reauthentications += 1
    conn.principal = f"User:{session.user}"
    conn.sasl_mechanism = session.mechanism
    conn.authenticated = True
    conn.sasl = None
    return _answer(ErrorCode.none, None, token, lifetime or 0)


def _answer(code: ErrorCode, message: str | None, token: bytes = b"", lifetime_ms: int = 0) -> Reply:
    return Reply({"error_code": code, "error_message": message, "auth_bytes": token, "session_lifetime": lifetime_ms})
