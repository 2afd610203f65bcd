"""What several handlers share: topics only the broker writes, topic creation with the broker's
defaults, how an error below the shell is answered
(`error_answer`, minibroker.errors: the error's Kafka code, or KAFKA_STORAGE_ERROR for a file-system
error, logged by the broker's `ctx.storage_errors` at most once a minute per distinct message), and
the group coordinator's requests (`group_coordinator`: answered by the coordinator only, once what
they wrote is replicated).
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

from minibroker.context import Reply
from minibroker.control.responses import error_body
from minibroker.errors import error_answer
from minibroker.protocol.errors import ApiError, ErrorCode
from minibroker.storage.audit_format import AUDIT_TOPIC
from minibroker.storage.config import is_internal
from minibroker.storage.manager import TopicExistsError, TopicInfo

if TYPE_CHECKING:
    from minibroker.context import HandleFn, RequestContext

__all__ = ["THROTTLING_QUOTA_EXCEEDED_MESSAGE", "broker_owned", "create_topic_or_error", "error_answer",
           "group_coordinator", "log"]

log = logging.getLogger(__name__)

# KIP-599: a topic refused by a strict controller-mutation quota (Kafka's Errors message).
THROTTLING_QUOTA_EXCEEDED_MESSAGE = "The throttling quota has been exceeded."


def broker_owned(name: str) -> bool:
    """A topic only the broker writes: Kafka's internal topics (committed offsets, and the
    transaction and share-group state a later version may keep) and the audit stream. Clients may
    read them, never produce to or delete them."""
    return is_internal(name) or name == AUDIT_TOPIC


def create_topic_or_error(ctx: RequestContext, name: str, num_partitions: int | None = None,
                          overrides: dict[str, str] | None = None) -> tuple[TopicInfo | None, ErrorCode]:
    """Create a topic with the broker defaults; (info, NONE), or (None, the error code). A topic
    created meanwhile by another request is answered as created."""
    logs = ctx.logs
    try:
        info = logs.create_topic(
            name,
            num_partitions if num_partitions is not None else ctx.config["num.partitions"],
            overrides or {},
            ctx.clock.now_ms(),
        )
    except TopicExistsError:
        return logs.topic(name), ErrorCode.none
    except (ApiError, OSError) as exc:
        return None, error_answer(ctx.storage_errors, exc, f"auto-creating topic {name}")[0]
    log.info("created topic %s with %d partition(s)", name, info.num_partitions)
    return info, ErrorCode.none


def group_coordinator(handle: HandleFn) -> HandleFn:
    """A request of the group coordinator (Kafka's GroupCoordinatorService, on a cluster): a broker
    that does not lead __consumer_offsets answers NOT_COORDINATOR (the client finds the coordinator
    again); the coordinator answers only once everything it appended to __consumer_offsets is
    acknowledged by the ISR (its high watermark passes it, as Kafka's CoordinatorRuntime completes
    a write), else COORDINATOR_NOT_AVAILABLE (refused under min.insync.replicas, or not replicated
    within offsets.commit.timeout.ms) or NOT_COORDINATOR (the leadership moved meanwhile), in every
    error field of the response. On one broker the high watermark is the log end: no wait."""

    @functools.wraps(handle)
    async def coordinated(ctx: RequestContext, request: Any) -> Reply | None:
        groups = ctx.groups
        if not groups.active():
            return _group_error(ctx, request, ErrorCode.not_coordinator)
        refused = groups.refused_appends
        reply = await handle(ctx, request)
        error = await groups.written(refused)
        if error != ErrorCode.none:
            return _group_error(ctx, request, error)
        return reply

    return coordinated


def _group_error(ctx: RequestContext, request: Any, code: ErrorCode) -> Reply:
    return Reply(error_body(ctx.schema.api_key, ctx.schema.response, request, code))
