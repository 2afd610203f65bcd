"""Error codes and helpers shared by several handlers."""

from __future__ import annotations

import logging

from minibroker.broker import wall_clock_ms
from storage.config import ConfigError
from storage.manager import InvalidPartitionsError, InvalidTopicError, TopicExistsError

log = logging.getLogger(__name__)

NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
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
INVALID_RECORD = 87
UNKNOWN_TOPIC_ID = 100

# Authorized-operations bit sets (AclOperation codes). No ACLs here: everything is allowed.
NO_AUTHORIZED_OPERATIONS = -2147483648
TOPIC_ALL_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
CLUSTER_ALL_OPERATIONS = sum(1 << op for op in (4, 5, 7, 8, 9, 10, 11, 12))


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
    log.info("created topic %s with %d partition(s)", name, info.num_partitions)
    return info, NONE
