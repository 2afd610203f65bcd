"""AddOffsetsToTxn (key 25), v0-v4: the group's `__consumer_offsets` partition joins the producer's
transaction, so that its TxnOffsetCommit offsets are committed or aborted with it (KIP-98).
PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2.

Authorization: WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then READ on
the group (GROUP_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(25, 0, 4, client_throttles_from=1)
async def add_offsets_to_txn(ctx: RequestContext, request: Any) -> Reply:
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return Reply({"error_code": ErrorCode.transactional_id_authorization_failed})
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return Reply({"error_code": ErrorCode.group_authorization_failed})
    if not request.group_id:
        return Reply({"error_code": ErrorCode.invalid_group_id})
    code = await ctx.txns.add_offsets(
        request.transactional_id, request.producer_id, request.producer_epoch, request.group_id)
    if code == ErrorCode.producer_fenced and ctx.version < 2:
        code = ErrorCode.invalid_producer_epoch
    return Reply({"error_code": code})
