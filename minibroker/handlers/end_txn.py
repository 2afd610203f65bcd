"""EndTxn (key 26), v0-v4: commit or abort a producer's transaction (KIP-98).

PrepareCommit/PrepareAbort is written to `__transaction_state`, the COMMIT/ABORT markers to every
partition of the transaction, then CompleteCommit/CompleteAbort (minibroker.transactions). A retry of
an end already complete is answered NONE; an end of the other kind, or with no transaction open,
INVALID_TXN_STATE; one while the markers are still owed, CONCURRENT_TRANSACTIONS. PRODUCER_FENCED is
INVALID_PRODUCER_EPOCH before v2. v5 (KIP-890 part 2: an epoch bump at every end) is not served: it
belongs to `transaction.version` 2, which this broker does not finalize, so clients do not send it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.handlers import Reply, handler
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(26, 0, 4, client_throttles_from=1)
async def end_txn(ctx: RequestContext, request: Any) -> Reply:
    code = await ctx.txns.end_txn(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed)
    if code == ErrorCode.producer_fenced and ctx.version < 2:
        code = ErrorCode.invalid_producer_epoch
    return Reply({"error_code": code})
