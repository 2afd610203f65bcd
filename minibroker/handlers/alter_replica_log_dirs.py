"""AlterReplicaLogDirs (key 34), v1-v2: move replicas between this broker's log directories, each
partition answered as Kafka's ReplicaManager.alterReplicaLogDirs answers it:

- a topic name too long for the future log's directory name (over 255 characters):
  INVALID_TOPIC_EXCEPTION;
- a destination that is not one of the broker's log directories (an absolute path, compared as
  Kafka compares it): LOG_DIR_NOT_FOUND;
- a partition the broker does not hold: UNKNOWN_TOPIC_OR_PARTITION;
- otherwise NONE: the replica is in its one log directory already, so nothing moves.

A partition named twice answers once, for the last directory given (Kafka reads the request into a
map). v0, which Kafka 4 removed, is not in kio.

Authorization: ALTER on the cluster, else every partition is answered CLUSTER_AUTHORIZATION_FAILED
(31).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation
from minibroker.handlers import Reply, handler
from minibroker.handlers.describe_log_dirs import log_dir
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext

MAX_DIR_NAME = 255
FUTURE_SUFFIX_LENGTH = 1 + 32 + len("-future")  # ".<uuid hex>-future" after "<topic>-<partition>"


def move_replica(ctx: RequestContext, topic: str, partition: int, destination: str) -> int:
    if len(f"{topic}-{partition}") + FUTURE_SUFFIX_LENGTH > MAX_DIR_NAME:
        return ErrorCode.invalid_topic_exception
    if destination != log_dir(ctx):
        return ErrorCode.log_dir_not_found
    if ctx.logs.log(topic, partition) is None:
        return ErrorCode.unknown_topic_or_partition
    return 0


@handler(34, 0, 2, client_throttles_from=1)
async def alter_replica_log_dirs(ctx: RequestContext, request: Any) -> Reply:
    destinations: dict[tuple[str, int], str] = {}
    for d in request.dirs:
        for t in d.topics:
            for p in t.partitions:
                destinations[(t.name, p)] = d.path
    by_topic: dict[str, list[dict]] = {}
    allowed = ctx.authorize_cluster(AclOperation.ALTER)
    for (topic, partition), destination in destinations.items():
        code = move_replica(ctx, topic, partition, destination) if allowed else ErrorCode.cluster_authorization_failed
        by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
    return Reply({"results": [{"topic_name": name, "partitions": parts} for name, parts in by_topic.items()]})
