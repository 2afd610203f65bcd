"""AlterUserScramCredentials (key 51), v0 (KIP-554): create, replace and delete SASL/SCRAM
credentials while the broker runs. The client sends the salted password, never the password; the
broker keeps the stored and server keys, in `scram-credentials.json`, before it answers, and the next
SCRAM authentication of that user uses them. Validation and Kafka's errors: minibroker.scram_credentials.
A disk error answers UNKNOWN_SERVER_ERROR for every user the request would have changed, and nothing
changes.

Authorization: ALTER on the cluster, else every user is answered CLUSTER_AUTHORIZATION_FAILED (31).
"""

from __future__ import annotations

import logging

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation
from minibroker.handlers import Reply, handler
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext

log = logging.getLogger(__name__)


@handler(51, 0, 0, client_throttles_from=0)
async def alter_user_scram_credentials(ctx: RequestContext, request: Any) -> Reply:
    deletions = [(d.name, d.mechanism) for d in request.deletions]
    upsertions = [(u.name, u.mechanism, u.iterations, bytes(u.salt), bytes(u.salted_password))
                  for u in request.upsertions]
    if not ctx.authorize_cluster(AclOperation.ALTER):
        refused = sorted({name for name, *_ in deletions + upsertions})
        return Reply({"results": [{"user": name, "error_code": ErrorCode.cluster_authorization_failed,
                                   "error_message": None} for name in refused]})
    try:
        results = ctx.auth.scram_credentials.alter(deletions, upsertions)
    except OSError as exc:
        log.error("could not store SCRAM credentials: %s", exc)
        users = dict.fromkeys(name for name, *_ in deletions + upsertions)
        results = [{"user": name, "error_code": ErrorCode.unknown_server_error, "error_message": None} for name in users]
    return Reply({"results": results})
