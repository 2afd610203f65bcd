"""InitProducerId (key 22), v0-v6: producer ids for idempotent producers.

Every call without a transactional id gets a fresh PID at epoch 0, as Kafka does for idempotent
producers; PIDs come from the ProducerIdAllocator, which never hands out an id twice, even across a
crash. Transactions are not supported: a transactional id is answered INVALID_REQUEST.
"""

from minibroker.handlers import handler
from minibroker.handlers.common import INVALID_REQUEST


@handler(22, 0, 6)
async def init_producer_id(ctx, request):
    if request.transactional_id is not None:
        return _result(INVALID_REQUEST, -1, -1)
    return _result(0, ctx.broker.producer_ids.next_id(), 0)


def _result(code: int, pid: int, epoch: int) -> dict:
    return {
        "throttle_time": 0,
        "error_code": code,
        "producer_id": pid,
        "producer_epoch": epoch,
        "ongoing_txn_producer_id": -1,
        "ongoing_txn_producer_epoch": -1,
    }
