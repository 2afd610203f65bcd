"""InitProducerId (key 22), v0-v6: producer ids and epochs for idempotent producers.

A request without a PID gets a fresh one at epoch 0 (PIDs are never handed out twice, even across a
crash); one that names its current PID and epoch (v3+, KIP-360) gets the epoch bumped; an older
epoch is fenced (see minibroker.producers.ProducerIds). Transactions are not supported: a
transactional id is answered INVALID_REQUEST.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.handlers import Reply, handler
from minibroker.handlers.common import error_answer
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.broker import RequestContext


@handler(22, 0, 6, client_throttles_from=1, audited=True)
async def init_producer_id(ctx: RequestContext, request: Any) -> Reply:
    if request.transactional_id is not None:
        return _result(ErrorCode.invalid_request, -1, -1)
    now_ms = ctx.broker.clock.now_ms()
    try:
        code, pid, epoch = ctx.broker.producer_ids.init(
            getattr(request, "producer_id", -1), getattr(request, "producer_epoch", -1), now_ms, ctx.version,
        )
    except OSError as exc:  # the next block of ids could not be recorded: none is handed out
        (code, _), pid, epoch = error_answer(ctx.broker, exc, "InitProducerId"), -1, -1
    if ctx.broker.audit is not None:
        ctx.broker.audit.record_init_producer_id(ctx, pid, epoch, code, 0, "", now_ms)
    return _result(code, pid, epoch)


def _result(code: ErrorCode, pid: int, epoch: int) -> Reply:
    return Reply({
        "error_code": code,
        "producer_id": pid,
        "producer_epoch": epoch,
        "ongoing_txn_producer_id": -1,
        "ongoing_txn_producer_epoch": -1,
    })
