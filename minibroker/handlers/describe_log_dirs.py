"""DescribeLogDirs (key 35), v1-v5: the broker's one log directory (the data dir) and the size of
each partition in it, as Kafka's ReplicaManager.describeLogDirs answers.

A null topic list means every partition the broker holds (internal topics included); otherwise the
named partitions that exist, and a topic none of whose named partitions exist is left out. Sizes
are the bytes of each partition's segments; the offset lag is 0 (the log end is the high watermark
on one broker) and no log is a future log (nothing moves between directories). From v4 on the
result carries the volume's total and usable bytes (statvfs, as Java's FileStore total/usable
space); v5's `is_cordoned` is false. v0, which Kafka 4 removed, is not in kio.

kafka-python infers the Kafka release a broker emulates from the versions it serves; DescribeLogDirs
v5 is its mark of Kafka 4.3.

Authorization: DESCRIBE on the cluster, else the top-level CLUSTER_AUTHORIZATION_FAILED (31) with no
results.
"""

from __future__ import annotations

import os

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation
from minibroker.handlers import Reply, handler
from minibroker.handlers.common import error_answer
from minibroker.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.context import RequestContext


def log_dir(ctx) -> str:
    """The log directory as Kafka names it: the absolute path of the configured directory."""
    return os.path.abspath(ctx.logs.data_dir)


def _volume_bytes(path: str) -> tuple[int, int]:
    try:
        st = os.statvfs(path)
    except OSError:
        return -1, -1
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


@handler(35, 0, 5, client_throttles_from=1)
async def describe_log_dirs(ctx: RequestContext, request: Any) -> Reply:
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return Reply({"error_code": ErrorCode.cluster_authorization_failed, "results": []})
    if request.topics is None:
        wanted = None
    else:
        wanted = {(t.topic, p) for t in request.topics for p in t.partitions}
    by_topic: dict[str, list[dict]] = {}
    error_code = ErrorCode.none
    try:
        for topic, partition, log in ctx.logs.logs():
            if wanted is None or (topic, partition) in wanted:
                by_topic.setdefault(topic, []).append({
                    "partition_index": partition,
                    "partition_size": log.size_bytes,  # an idle partition's from its files' sizes
                    "offset_lag": 0,
                    "is_future_key": False,
                })
    except OSError as exc:  # the directory cannot be listed: Kafka's answer for an offline log dir
        by_topic, (error_code, _) = {}, error_answer(ctx.storage_errors, exc, "DescribeLogDirs")
    path = log_dir(ctx)
    total, usable = _volume_bytes(path)
    result = {
        "error_code": error_code,
        "log_dir": path,
        "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()],
        "total_bytes": total,
        "usable_bytes": usable,
        "is_cordoned": False,
    }
    return Reply({"error_code": ErrorCode.none, "results": [result]})
