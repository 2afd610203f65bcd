"""Error codes and helpers shared by several handlers."""

from __future__ import annotations

import logging
import time

from minibroker.broker import wall_clock_ms
from storage.audit_format import AUDIT_TOPIC
from storage.config import ConfigError, is_internal
from storage.errors import storage_error_message
from storage.manager import InvalidPartitionsError, InvalidTopicError, StrayDataError, TopicExistsError

log = logging.getLogger(__name__)

NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
REPLICA_NOT_AVAILABLE = 9
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUIRED_ACKS = 21
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_CONFIG = 40
INVALID_REQUEST = 42
POLICY_VIOLATION = 44
INVALID_TXN_STATE = 48
KAFKA_STORAGE_ERROR = 56
LOG_DIR_NOT_FOUND = 57
PREFERRED_LEADER_NOT_AVAILABLE = 80
ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
ELECTION_NOT_NEEDED = 84
NO_REASSIGNMENT_IN_PROGRESS = 85
UNSUPPORTED_COMPRESSION_TYPE = 76
INVALID_RECORD = 87
UNKNOWN_TOPIC_ID = 100

# Authorized-operations bit sets (AclOperation codes). No ACLs here: everything is allowed.
NO_AUTHORIZED_OPERATIONS = -2147483648
TOPIC_ALL_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
CLUSTER_ALL_OPERATIONS = sum(1 << op for op in (4, 5, 7, 8, 9, 10, 11, 12))


_storage_errors_logged: dict[str, float] = {}


def log_storage_error(fmt: str, *args) -> None:
    """Log a storage error, at most once a minute per distinct message (a full disk fails every
    request until it has room again)."""
    message = fmt % args
    now = time.monotonic()
    if now - _storage_errors_logged.get(message, -1e9) >= 60:
        if len(_storage_errors_logged) > 1000:
            _storage_errors_logged.clear()
        _storage_errors_logged[message] = now
        log.error("%s", message)


def broker_owned(name: str) -> bool:
    """A topic only the broker writes: Kafka's internal topics (committed offsets, and the
    transaction and share-group state a later version may keep) and the audit stream. Clients may
    read them, never produce to or delete them."""
    return is_internal(name) or name == AUDIT_TOPIC


def create_topic_or_error(broker, name: str, num_partitions: int | None = None, overrides=None):
    """Create a topic with the broker defaults; returns (info, 0) or (None, error_code)."""
    try:
        info = broker.logs.create_topic(
            name,
            num_partitions if num_partitions is not None else broker.config["num.partitions"],
            overrides or {},
            wall_clock_ms(),
        )
    except InvalidTopicError:
        return None, INVALID_TOPIC_EXCEPTION
    except TopicExistsError:
        return broker.logs.topic(name), NONE
    except InvalidPartitionsError:
        return None, INVALID_PARTITIONS
    except ConfigError:
        return None, INVALID_CONFIG
    except StrayDataError as exc:
        log.error("not auto-creating topic %s: %s", name, exc)
        return None, KAFKA_STORAGE_ERROR
    except OSError as exc:
        log.error("could not create topic %s: %s", name, storage_error_message(exc))
        return None, KAFKA_STORAGE_ERROR
    log.info("created topic %s with %d partition(s)", name, info.num_partitions)
    return info, NONE
