"""One module per API. Each registers its handler with the versions it serves; ApiVersions is
generated from this registry (clamped to what kio has schemas for), so what the broker advertises is
exactly what it answers.

A handler is `async def handle(ctx, request) -> dict | None`: the dict describes the response over
the union of all versions' fields (see protocol.entities.build); None means no response (acks=0).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from protocol.messages import kio_versions

if TYPE_CHECKING:
    from minibroker.broker import RequestContext

HandleFn = Callable[["RequestContext", Any], Awaitable[dict | None]]


@dataclass(frozen=True)
class Handler:
    api_key: int
    name: str
    min_version: int
    max_version: int
    handle: HandleFn


REGISTRY: dict[int, Handler] = {}

MODULES = (
    "api_versions",
    "metadata",
    "produce",
    "fetch",
    "list_offsets",
    "create_topics",
    "delete_topics",
    "describe_configs",
    "describe_cluster",
    "init_producer_id",
    "find_coordinator",
    "sasl_handshake",
    "sasl_authenticate",
    "describe_client_quotas",
    "alter_client_quotas",
    "join_group",
    "sync_group",
    "heartbeat",
    "leave_group",
    "offset_commit",
    "offset_fetch",
    "list_groups",
    "describe_groups",
    "delete_groups",
    "describe_log_dirs",
    "alter_replica_log_dirs",
    "elect_leaders",
    "alter_partition_reassignments",
    "list_partition_reassignments",
    "describe_quorum",
    "list_config_resources",
    "alter_configs",
    "incremental_alter_configs",
    "create_partitions",
    "delete_records",
    "offset_delete",
    "describe_topic_partitions",
    "describe_user_scram_credentials",
    "alter_user_scram_credentials",
)


def handler(api_key: int, min_version: int, max_version: int) -> Callable[[HandleFn], HandleFn]:
    def register(fn: HandleFn) -> HandleFn:
        known = kio_versions(api_key)
        assert known is not None, f"kio has no schemas for api {api_key}"
        low, high = max(min_version, known[0]), min(max_version, known[1])
        assert api_key not in REGISTRY, f"api {api_key} registered twice"
        REGISTRY[api_key] = Handler(api_key, fn.__name__, low, high, fn)
        return fn

    return register


def load_all() -> dict[int, Handler]:
    for module in MODULES:
        importlib.import_module(f"{__name__}.{module}")
    return REGISTRY
