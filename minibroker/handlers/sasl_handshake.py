"""SaslHandshake (key 17), v1 only: pick the SASL mechanism of a SASL_PLAINTEXT or SASL_SSL connection,
or begin its re-authentication (KIP-368).

Behaviour (Kafka's SaslServerAuthenticator): a mechanism the listener enables is answered NONE with
the enabled list, and SaslAuthenticate requests follow; an unknown one UNSUPPORTED_SASL_MECHANISM (33)
with the list, then the connection is closed. A handshake on a listener without SASL, or on an
authenticated connection that may not re-authenticate now, is answered ILLEGAL_SASL_STATE (34), as by
KafkaApis; a second handshake during authentication gets the same answer and the connection is closed.

Re-authentication (Kafka's KafkaChannel.maybeBeginServerReauthentication): an authenticated connection
whose session has an expiry (connections.max.reauth.ms, or an OAUTHBEARER token's lifetime) may send
a new handshake, at most once a second; its SaslAuthenticate exchange must use the same mechanism
(another is answered NONE here, and the exchange's next request closes the connection unanswered) and
end with the same principal. The connection keeps serving nothing else until it completes.

v0 (SASL tokens without Kafka framing, for pre-1.0 clients) is not served: no client in the suite
sends it (see minibroker.sasl).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.handlers import Reply, SaslPhase, handler
from minibroker.sasl import SaslSession
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext

MIN_REAUTH_INTERVAL_S = 1.0  # KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS
# conn.sasl during a re-authentication that asked for another mechanism (Kafka's REAUTH_BAD_MECHANISM).
BAD_MECHANISM = "bad mechanism"


@handler(17, 1, 1, sasl_phase=SaslPhase.HANDSHAKE)
async def sasl_handshake(ctx: RequestContext, request: Any) -> Reply:
    conn = ctx.connection
    security = conn.security
    enabled = security.mechanisms if security is not None and security.sasl else ()
    if conn.authenticated:
        now = ctx.clock.monotonic()
        if (conn.session_expires_at is None or conn.sasl is not None
                or now - conn.reauth_started_at < MIN_REAUTH_INTERVAL_S):
            return Reply({"error_code": ErrorCode.illegal_sasl_state, "mechanisms": ()})
        conn.reauth_started_at = now
    elif conn.sasl is not None:
        ctx.close_connection = True
        return Reply({"error_code": ErrorCode.illegal_sasl_state, "mechanisms": enabled})
    if request.mechanism not in enabled:
        ctx.close_connection = True
        return Reply({"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": enabled})
    assert security is not None
    if conn.authenticated and request.mechanism != conn.sasl_mechanism:
        conn.sasl = BAD_MECHANISM
    else:
        previous = (conn.sasl_mechanism or "", conn.principal) if conn.authenticated else None
        server = security.new_sasl_server(request.mechanism, ctx.auth.sasl_users, ctx.clock.now_ms)
        conn.sasl = SaslSession(request.mechanism, server, previous)
    return Reply({"error_code": ErrorCode.none, "mechanisms": enabled})
