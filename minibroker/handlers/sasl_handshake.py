"""SaslHandshake (key 17), v1 only: pick the SASL mechanism of a SASL_PLAINTEXT connection.

Behaviour (Kafka's SaslServerAuthenticator): an enabled mechanism is answered NONE with the enabled
list, and SaslAuthenticate requests follow; an unknown one UNSUPPORTED_SASL_MECHANISM (33) with the
list, then the connection is closed. A handshake on a PLAINTEXT listener, or after authentication,
is answered ILLEGAL_SASL_STATE (34), as by KafkaApis; a second handshake during authentication gets
the same answer and the connection is closed. v0 (SASL tokens without Kafka framing, for pre-1.0
clients) is not served: no client in the suite sends it (see minibroker.sasl).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.handlers import Reply, SaslPhase, handler
from minibroker.sasl import SaslSession
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(17, 1, 1, sasl_phase=SaslPhase.HANDSHAKE)
async def sasl_handshake(ctx: RequestContext, request: Any) -> Reply:
    conn = ctx.connection
    enabled = ctx.auth.sasl_users.mechanisms
    if conn.authenticated:
        return Reply({"error_code": ErrorCode.illegal_sasl_state, "mechanisms": ()})
    if conn.sasl is not None:
        ctx.close_connection = True
        return Reply({"error_code": ErrorCode.illegal_sasl_state, "mechanisms": enabled})
    if request.mechanism not in enabled:
        ctx.close_connection = True
        return Reply({"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": enabled})
    conn.sasl = SaslSession(request.mechanism, ctx.auth.sasl_users.new_server(request.mechanism))
    return Reply({"error_code": ErrorCode.none, "mechanisms": enabled})
