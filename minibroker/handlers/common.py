"""What several handlers share: topics only the broker writes, topic creation with the broker's
defaults, and how an error below the shell is answered
(`error_answer`, minibroker.errors: the error's Kafka code, or KAFKA_STORAGE_ERROR for a file-system
error, logged by the broker's `ctx.storage_errors` at most once a minute per distinct message).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from minibroker.errors import error_answer
from minibroker.protocol.errors import ApiError, ErrorCode
from minibroker.storage.audit_format import AUDIT_TOPIC
from minibroker.storage.config import is_internal
from minibroker.storage.manager import TopicExistsError, TopicInfo

if TYPE_CHECKING:
    from minibroker.context import RequestContext

__all__ = ["THROTTLING_QUOTA_EXCEEDED_MESSAGE", "broker_owned", "create_topic_or_error", "error_answer", "log"]

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
