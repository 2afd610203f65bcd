"""EndTxn (key 26), v0-v5: commit or abort a producer's transaction (KIP-98).

PrepareCommit/PrepareAbort is written to `__transaction_state`, the COMMIT/ABORT markers to every
partition of the transaction, then CompleteCommit/CompleteAbort (minibroker.transactions). A retry of
an end already complete is answered NONE; an end of the other kind, or with no transaction open,
INVALID_TXN_STATE; one while the markers are still owed, CONCURRENT_TRANSACTIONS. PRODUCER_FENCED is
INVALID_PRODUCER_EPOCH before v2.

v5 is transactions version 2 (KIP-890 part 2; Kafka 4 clients send it when ApiVersions finalizes
`transaction.version` 2, minibroker.features): every end bumps the epoch, the markers go out at the
bumped epoch, and the answer carries the producer id and epoch the client goes on with (a new
producer id at epoch 0 once the epoch is exhausted); an abort with nothing added bumps it too; a
retry is told by its epoch (minibroker.transactions.state). Served at any level of the feature: the
request's version decides, as in Kafka.

Authorization: WRITE on the transactional id, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(26, 0, 5, client_throttles_from=1)
async def end_txn(ctx: RequestContext, request: Any) -> Reply:
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return Reply({"error_code": ErrorCode.transactional_id_authorization_failed, "producer_id": -1,
                      "producer_epoch": -1})
    if ctx.version >= 5:
        code, producer_id, producer_epoch = await ctx.txns.end_txn_v2(
            request.transactional_id, request.producer_id, request.producer_epoch, request.committed)
    else:
        code = await ctx.txns.end_txn(
            request.transactional_id, request.producer_id, request.producer_epoch, request.committed)
        producer_id, producer_epoch = -1, -1
    if code == ErrorCode.producer_fenced and ctx.version < 2:
        code = ErrorCode.invalid_producer_epoch
    return Reply({"error_code": code, "producer_id": producer_id, "producer_epoch": producer_epoch})
