"""One module per API. Each registers its handler together with the facts of its API, so one file
tells the whole story of an API (franz-go's kfake does the same): the versions it serves, from which
version its clients honour a throttle themselves (KIP-219), which client byte-rate quota it is
charged to, whether an unauthenticated SASL connection may send it, whether its decisions go to the
audit stream. `Broker.handle_frame` reads these facts; it knows no API by its key. ApiVersions is
generated from this registry (clamped to what kio has schemas for), so what the broker advertises is
exactly what it answers.

The contract (minibroker.context, which defines `Reply`, `Handler` and `RequestContext`, the
broker's services by name): `async def handle(ctx: RequestContext, request) -> Reply | None`. `request` is kio's
request object of the version asked for (Produce's is minibroker.protocol.produce_request's: the same fields, its
records views of the frame). A `Reply` holds the response's fields over the union of all
its versions (minibroker.protocol.entities.build keeps the ones the version has), never `throttle_time`, which
the broker fills in from the quotas and `Reply.throttle_ms`; None means no response at all (Produce
with acks=0).
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping

from minibroker.context import ByteRate, HandleFn, Handler, Reply, SaslPhase
from minibroker.protocol.messages import api_name, kio_versions

__all__ = ["ByteRate", "Handler", "Reply", "SaslPhase", "api_version_list", "handler", "load_all"]

# The handlers as their modules register them (api key -> Handler), once per process. Each broker
# gets its own copy (`load_all`): replacing a handler on one broker leaves the others alone.
_DEFINITIONS: dict[int, Handler] = {}

MODULES = (
    "api_versions",
    "metadata",
    "produce",
    "fetch",
    "list_offsets",
    "offset_for_leader_epoch",
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
    "consumer_group_heartbeat",
    "consumer_group_describe",
    "streams_group_heartbeat",
    "streams_group_describe",
    "share_group_heartbeat",
    "share_group_describe",
    "share_fetch",
    "share_acknowledge",
    "describe_share_group_offsets",
    "alter_share_group_offsets",
    "delete_share_group_offsets",
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
    "add_partitions_to_txn",
    "add_offsets_to_txn",
    "end_txn",
    "txn_offset_commit",
    "describe_transactions",
    "list_transactions",
    "write_txn_markers",
    "describe_producers",
    "update_features",
    "get_telemetry_subscriptions",
    "push_telemetry",
    "describe_acls",
    "create_acls",
    "delete_acls",
)


def handler(
    api_key: int,
    min_version: int,
    max_version: int,
    *,
    client_throttles_from: int | None = None,
    byte_rate: ByteRate | None = None,
    throttled_body: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    sasl_phase: SaslPhase | None = None,
    audited: bool = False,
) -> Callable[[HandleFn], HandleFn]:
    """Register `fn` as the handler of `api_key` (see the module docstring and `Handler`)."""
    assert (byte_rate is ByteRate.FETCH) == (throttled_body is not None), \
        "a quota on the response's size needs the response a throttle leaves, and only it does"

    def register(fn: HandleFn) -> HandleFn:
        known = kio_versions(api_key)
        assert known is not None, f"kio has no schemas for api {api_key}"
        low, high = max(min_version, known[0]), min(max_version, known[1])
        assert api_key not in _DEFINITIONS, f"api {api_key} registered twice"
        _DEFINITIONS[api_key] = Handler(
            api_key, fn.__name__, api_name(api_key), low, high, fn,
            client_throttles_from=client_throttles_from, byte_rate=byte_rate, throttled_body=throttled_body,
            sasl_phase=sasl_phase, audited=audited,
        )
        return fn

    return register


def api_version_list(handlers: Mapping[int, Handler]) -> list[dict[str, int]]:
    """ApiVersions' api_keys: every handler's version range, by api key."""
    return [
        {"api_key": h.api_key, "min_version": h.min_version, "max_version": h.max_version}
        for h in sorted(handlers.values(), key=lambda h: h.api_key)
    ]


def load_all() -> dict[int, Handler]:
    """Every handler, api key -> Handler: a new dict for each caller (each broker its own)."""
    for module in MODULES:
        importlib.import_module(f"{__name__}.{module}")
    return dict(_DEFINITIONS)
