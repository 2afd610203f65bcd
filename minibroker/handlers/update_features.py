"""UpdateFeatures (key 57), v0-v2: finalized feature levels changed at runtime (KIP-584; Kafka's
`kafka-features upgrade|downgrade`, Admin.updateFeatures). Served by the controller, which this
broker is.

The one feature is `transaction.version` (minibroker.features): levels 0-2; a lower level needs the
upgrade type SAFE_DOWNGRADE or UNSAFE_DOWNGRADE, a level below 1 removes the feature (level 0). The
request is all or nothing, as Kafka's controller applies it: a refusal (INVALID_UPDATE_VERSION, with
Kafka's message) is the top-level error with no per-feature results; else each feature's result is
NONE (v0-v1; v2 has no per-feature results). validate_only (v1+) checks without changing. The new
level is kept in the data directory before it is answered; a file-system error is
KAFKA_STORAGE_ERROR, nothing changed. Its Kafka 4.4 clients throttle themselves (AbstractResponse's
default: the response has a throttle time).

Authorization: ALTER on the cluster, else the top-level CLUSTER_AUTHORIZATION_FAILED (31) (Kafka's
ControllerApis).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.features import UPGRADE, FeatureUpdate
from minibroker.auth import AclOperation
from minibroker.handlers import Reply, handler
from minibroker.handlers.common import error_answer
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(57, 0, 2)
async def update_features(ctx: RequestContext, request: Any) -> Reply:
    if not ctx.authorize_cluster(AclOperation.ALTER):
        return Reply({"error_code": ErrorCode.cluster_authorization_failed,
                      "error_message": "Cluster authorization failed.", "results": []})
    updates = [
        FeatureUpdate(u.feature, u.max_version_level,
                      getattr(u, "upgrade_type", UPGRADE if not getattr(u, "allow_downgrade", False) else 2))
        for u in request.feature_updates
    ]
    try:
        code, message = ctx.features.update(updates, getattr(request, "validate_only", False))
    except OSError as exc:
        code, message = error_answer(ctx.storage_errors, exc, "UpdateFeatures")
    return Reply({
        "error_code": code,
        "error_message": message,
        # Kafka's UpdateFeaturesResponse: no results beside a top-level error; each feature NONE
        # (with Errors.NONE's message) otherwise.
        "results": [] if code else [{"feature": u.feature, "error_code": ErrorCode.none, "error_message": "NONE"}
                                    for u in updates],
    })
