"""FindCoordinator (key 10), v0-v6: the coordinator of a group (key type 0) is the leader of the
group's partition of `__consumer_offsets`, of a transactional id (key type 1) the leader of its
partition of `__transaction_state` (the key's Java hashCode modulo the partition count, as Kafka's
coordinators pick it; minibroker.cluster.ClusterView.coordinator). While the topic does not exist
yet, the broker asked coordinates (it creates the topic when first needed); a partition without a
leader up is COORDINATOR_NOT_AVAILABLE, which clients retry. An empty transactional id, or a key type
Kafka does not have, is INVALID_REQUEST.

v4+ batches keys in coordinator_keys and answers one Coordinator each.

Authorization (Kafka's getCoordinator): DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED) or on the
transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); a share-group key CLUSTER_ACTION on the
cluster. Before v4 the refusal carries Kafka's message, from v4 the code alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.auth import AclOperation, ResourceType
from minibroker.handlers import Reply, handler
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.offsets_store import TOPIC as OFFSETS_TOPIC
from minibroker.storage.transaction_store import TOPIC as TRANSACTIONS_TOPIC

if TYPE_CHECKING:
    from minibroker.context import RequestContext

GROUP, TRANSACTION, SHARE = 0, 1, 2


@handler(10, 0, 6, client_throttles_from=2)
async def find_coordinator(ctx: RequestContext, request: Any) -> Reply:
    key_type = getattr(request, "key_type", GROUP)
    topic = {GROUP: OFFSETS_TOPIC, TRANSACTION: TRANSACTIONS_TOPIC}.get(key_type)

    def answer(key: str) -> dict[str, Any]:
        if key_type == GROUP and not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, key):
            return _no_node(ErrorCode.group_authorization_failed, "Group authorization failed.")
        if key_type == TRANSACTION and not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
            return _no_node(ErrorCode.transactional_id_authorization_failed, "Transactional Id authorization failed.")
        if key_type not in (GROUP, TRANSACTION, SHARE) or (key_type == TRANSACTION and not key):
            why = "an empty transactional id" if key_type == TRANSACTION else f"unknown key type {key_type}"
            return _no_node(ErrorCode.invalid_request, why)
        if key_type == SHARE and not ctx.authorize_cluster(AclOperation.CLUSTER_ACTION):
            return _no_node(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
        if key_type == GROUP and not ctx.groups.ensure_topic():
            # __consumer_offsets could not be made: fewer brokers than offsets.topic.replication.factor.
            return _no_node(ErrorCode.coordinator_not_available, "The coordinator is not available.")
        endpoint = ctx.cluster.coordinator(ctx.connection.listener, topic, key)
        if endpoint["node_id"] < 0:
            return _no_node(ErrorCode.coordinator_not_available, "The coordinator is not available.")
        return {"error_code": ErrorCode.none, "error_message": None, "node_id": endpoint["node_id"],
                "host": endpoint["host"], "port": endpoint["port"]}

    keys = getattr(request, "coordinator_keys", None)
    if keys is None:
        single = answer(request.key)
        if single["error_code"] == ErrorCode.none and ctx.version >= 1:
            # Kafka answers v1-v3 with Errors.NONE's message, "NONE" (its FindCoordinatorResponse).
            single = {**single, "error_message": "NONE"}
        return Reply(single)
    return Reply({"coordinators": [{"key": key, **_unexplained(answer(key))} for key in keys]})


def _no_node(code: ErrorCode, message: str) -> dict[str, Any]:
    """An error with Kafka's Node.noNode."""
    return {"error_code": code, "error_message": message, "node_id": -1, "host": "", "port": -1}


_AUTHORIZATION_ERRORS = (ErrorCode.group_authorization_failed, ErrorCode.transactional_id_authorization_failed,
                         ErrorCode.cluster_authorization_failed)


def _unexplained(answer: dict[str, Any]) -> dict[str, Any]:
    """v4+: Kafka answers a key refused for its ACLs with the code alone."""
    return {**answer, "error_message": None} if answer["error_code"] in _AUTHORIZATION_ERRORS else answer
