"""InitProducerId (key 22), v0-v6: producer ids and epochs, for idempotent and transactional producers.

Without a transactional id: a request without a PID gets a fresh one at epoch 0 (PIDs are never
handed out twice, even across a crash); one that names its current PID and epoch (v3+, KIP-360) gets
the epoch bumped; an older epoch is fenced (see minibroker.producers.ProducerIds).

With one, the transaction coordinator answers (minibroker.transactions): the id's producer id with
its epoch bumped, fencing the previous epoch and aborting its open transaction (answered
CONCURRENT_TRANSACTIONS until the abort is done: the client retries), a fresh producer id once the
epoch is exhausted, INVALID_TRANSACTION_TIMEOUT for a transaction.timeout.ms above
transaction.max.timeout.ms. A producer id without an epoch, or an epoch without a producer id, is
INVALID_REQUEST (Kafka's KafkaApis.handleInitProducerIdRequest). PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v4. v6's two-phase
commit (KIP-939: enable_2pc, keep_prepared_txn) is not enabled here
(transaction.two.phase.commit.enable's default): TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka answers.

Authorization (Kafka's handleInitProducerIdRequest): with a transactional id, WRITE on it, else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53); an idempotent producer needs IDEMPOTENT_WRITE on the
cluster or WRITE on some topic (KIP-679: any ALLOW for WRITE on a topic that no DENY wholly covers),
else CLUSTER_AUTHORIZATION_FAILED (31).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.handlers.common import error_answer
from minibroker.protocol.entities import to_ms
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.transaction_records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(22, 0, 6, client_throttles_from=1, audited=True)
async def init_producer_id(ctx: RequestContext, request: Any) -> Reply:
    now_ms = ctx.clock.now_ms()
    pid_asked, epoch_asked = getattr(request, "producer_id", -1), getattr(request, "producer_epoch", -1)
    if request.transactional_id is not None and not ctx.authorize(
            AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        code, pid, epoch = ErrorCode.transactional_id_authorization_failed, -1, -1
    elif request.transactional_id is None and not (
            ctx.authorize_cluster(AclOperation.IDEMPOTENT_WRITE, log_if_denied=False)
            or ctx.authorize_by_resource_type(AclOperation.WRITE, ResourceType.TOPIC)):
        code, pid, epoch = ErrorCode.cluster_authorization_failed, -1, -1
    elif (pid_asked == NO_PRODUCER_ID) != (epoch_asked == NO_PRODUCER_EPOCH):
        # Kafka's handleInitProducerIdRequest: -1/-1 asks for a fresh id, both set name the current
        # one; one without the other is malformed, whether or not there is a transactional id.
        code, pid, epoch = ErrorCode.invalid_request, -1, -1
    elif request.transactional_id is not None:
        if getattr(request, "enable2_pc", False) or getattr(request, "keep_prepared_txn", False):
            code, pid, epoch = ErrorCode.transactional_id_authorization_failed, -1, -1
        else:
            code, pid, epoch = await ctx.txns.init_producer_id(
                request.transactional_id, to_ms(request.transaction_timeout), pid_asked, epoch_asked)
            if code == ErrorCode.producer_fenced and ctx.version < 4:
                code = ErrorCode.invalid_producer_epoch
    else:
        try:
            code, pid, epoch = ctx.producer_ids.init(pid_asked, epoch_asked, now_ms, ctx.version)
        except OSError as exc:  # the next block of ids could not be recorded: none is handed out
            (code, _), pid, epoch = error_answer(ctx.storage_errors, exc, "InitProducerId"), -1, -1
    if ctx.audit is not None:
        ctx.audit.record_init_producer_id(ctx, pid, epoch, code, 0, "", now_ms)
    return Reply({
        "error_code": code,
        "producer_id": pid,
        "producer_epoch": epoch,
        "ongoing_txn_producer_id": -1,
        "ongoing_txn_producer_epoch": -1,
    })
