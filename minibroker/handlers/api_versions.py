"""ApiVersions (key 18). Generated from the handler registry.

Quirks: the response always uses response header v0 (KIP-511), and a request at a version we lack
is answered UNSUPPORTED_VERSION with our ranges in v0 form (see Broker._api_versions_fallback), so
clients that start high (kafka-python v4, librdkafka v3) can retry lower. aiokafka sends v0 only.
From v3 (flexible), in lean producer-state mode, the response also carries the lean producer state proposal's duplicate
window in tagged field 19778 (protocol.extensions; added by Broker._encode, as on InitProducerId).
From v3 the finalized features (KIP-584) ride in tagged fields too (minibroker.features):
`transaction.version`, which decides whether Kafka 4 clients use transactions version 2, and
`share.version`, whether share groups (KIP-932) are served.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.handlers import Reply, SaslPhase, api_version_list, handler
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(18, 0, 4, client_throttles_from=2, sasl_phase=SaslPhase.HANDSHAKE)
async def api_versions(ctx: RequestContext, request: Any) -> Reply:
    if ctx.version >= 3:  # KIP-511: who the client is (client telemetry's match selectors, KIP-714)
        ctx.connection.software_name = request.client_software_name or ""
        ctx.connection.software_version = request.client_software_version or ""
    return Reply({
        "error_code": ErrorCode.none,
        "api_keys": api_version_list(ctx.handlers),
        **ctx.features.api_versions_fields(ctx.version),
        "zk_migration_ready": False,
    })
