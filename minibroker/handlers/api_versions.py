"""ApiVersions (key 18). Generated from the handler registry.

Quirks: the response always uses response header v0 (KIP-511), and a request at a version we lack
is answered UNSUPPORTED_VERSION with our ranges in v0 form (see Broker._api_versions_fallback), so
clients that start high (kafka-python v4, librdkafka v3) can retry lower. aiokafka sends v0 only.
From v3 (flexible), in lean producer-state mode, the response also carries seed 003's duplicate
window in tagged field 19778 (protocol.extensions; added by Broker._encode, as on InitProducerId).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.handlers import Reply, SaslPhase, api_version_list, handler
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(18, 0, 4, client_throttles_from=2, sasl_phase=SaslPhase.HANDSHAKE)
async def api_versions(ctx: RequestContext, request: Any) -> Reply:
    return Reply({
        "error_code": ErrorCode.none,
        "api_keys": api_version_list(ctx.handlers),
        "supported_features": (),
        "finalized_features_epoch": -1,
        "finalized_features": (),
        "zk_migration_ready": False,
    })
