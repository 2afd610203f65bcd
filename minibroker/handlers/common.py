"""What several handlers share: how an error below the shell is answered, topics only the broker
writes, topic creation with the broker's defaults, the authorized-operations bit sets.

Errors are answered in one place (`error_answer`): an exception that carries its Kafka code
(protocol.errors.ApiError: a topic that exists, a bad config value, records on disk in the way, ...)
is answered with that code and its message; a file-system error (an OSError: disk full, read-only,
out of descriptors) with KAFKA_STORAGE_ERROR and a one-line message naming the file. Storage faults
are logged, at most once a minute per distinct message (a full disk fails every request until it has
room again).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from minibroker.protocol.errors import ApiError, ErrorCode
from minibroker.storage.audit_format import AUDIT_TOPIC
from minibroker.storage.config import is_internal
from minibroker.storage.errors import StrayDataError, storage_error_message
from minibroker.storage.manager import TopicExistsError, TopicInfo

if TYPE_CHECKING:
    from minibroker.broker import Broker

log = logging.getLogger(__name__)

# Authorized-operations bit sets (AclOperation codes). No ACLs here: everything is allowed.
NO_AUTHORIZED_OPERATIONS = -2147483648
TOPIC_ALL_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
# Kafka's AclEntry.supportedOperations(CLUSTER): CREATE, ALTER, DESCRIBE, CLUSTER_ACTION,
# DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE (WRITE is not an operation on the cluster).
CLUSTER_ALL_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))

# KIP-599: a topic refused by a strict controller-mutation quota (Kafka's Errors message).
THROTTLING_QUOTA_EXCEEDED_MESSAGE = "The throttling quota has been exceeded."

STORAGE_ERROR_LOG_INTERVAL_S = 60.0
_storage_errors_logged: dict[str, float] = {}


def log_storage_error(broker: Broker, message: str) -> None:
    """Log a storage fault, at most once a minute (of the broker's clock) per distinct message."""
    now = broker.clock.monotonic()
    if now - _storage_errors_logged.get(message, -1e9) >= STORAGE_ERROR_LOG_INTERVAL_S:
        if len(_storage_errors_logged) > 1000:
            _storage_errors_logged.clear()
        _storage_errors_logged[message] = now
        log.error("%s", message)


def error_answer(broker: Broker, exc: ApiError | OSError, what: str) -> tuple[ErrorCode, str]:
    """The error code and message that answer `exc`, raised while doing `what` (for the log, e.g.
    "t-0" or "creating topic t"). See the module docstring."""
    if isinstance(exc, ApiError):
        if isinstance(exc, StrayDataError):
            log_storage_error(broker, f"{what}: {exc}")
        return exc.error_code, str(exc)
    message = storage_error_message(exc)
    log_storage_error(broker, f"{what}: {message}")
    return ErrorCode.kafka_storage_error, message


def broker_owned(name: str) -> bool:
    """A topic only the broker writes: Kafka's internal topics (committed offsets, and the
    transaction and share-group state a later version may keep) and the audit stream. Clients may
    read them, never produce to or delete them."""
    return is_internal(name) or name == AUDIT_TOPIC


def create_topic_or_error(broker: Broker, name: str, num_partitions: int | None = None,
                          overrides: dict[str, str] | None = None) -> tuple[TopicInfo | None, ErrorCode]:
    """Create a topic with the broker defaults; (info, NONE), or (None, the error code). A topic
    created meanwhile by another request is answered as created."""
    try:
        info = broker.logs.create_topic(
            name,
            num_partitions if num_partitions is not None else broker.config["num.partitions"],
            overrides or {},
            broker.clock.now_ms(),
        )
    except TopicExistsError:
        return broker.logs.topic(name), ErrorCode.none
    except (ApiError, OSError) as exc:
        return None, error_answer(broker, exc, f"auto-creating topic {name}")[0]
    log.info("created topic %s with %d partition(s)", name, info.num_partitions)
    return info, ErrorCode.none
