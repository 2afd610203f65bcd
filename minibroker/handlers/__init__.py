"""One module per API. Each registers its handler together with the facts of its API, so one file
tells the whole story of an API (franz-go's kfake does the same): the versions it serves, from which
version its clients honour a throttle themselves (KIP-219), which client byte-rate quota it is
charged to, whether an unauthenticated SASL connection may send it, whether its decisions go to the
audit stream. `Broker.handle_frame` reads these facts; it knows no API by its key. ApiVersions is
generated from this registry (clamped to what kio has schemas for), so what the broker advertises is
exactly what it answers.

The contract: `async def handle(ctx: RequestContext, request) -> Reply | None`. `request` is kio's
request object of the version asked for (Produce's is minibroker.protocol.produce_request's: the same fields, its
records views of the frame). A `Reply` holds the response's fields over the union of all
its versions (minibroker.protocol.entities.build keeps the ones the version has), never `throttle_time`, which
the broker fills in from the quotas and `Reply.throttle_ms`; None means no response at all (Produce
with acks=0).
"""

from __future__ import annotations

import enum
import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from minibroker.protocol.messages import api_name, kio_versions

if TYPE_CHECKING:
    from minibroker.broker import RequestContext


@dataclass(frozen=True, slots=True)
class Reply:
    """A handler's answer. `body`: the response's fields, throttle_time left out; `throttle_ms`: a
    throttle the handler decided itself, for a quota it enforces (the producer-id quota), which the
    response carries and the connection waits out like a client-quota throttle."""

    body: dict[str, Any]
    throttle_ms: int = 0


HandleFn = Callable[["RequestContext", Any], Awaitable["Reply | None"]]


class ByteRate(enum.Enum):
    """The client byte-rate quota an API is charged to, as Kafka's KafkaApis charges it. The value is
    the quota's key (and the audit's throttle_quota)."""

    PRODUCE = "producer_byte_rate"  # the request's size; the request is handled and answered anyway
    FETCH = "consumer_byte_rate"  # the response's size; a throttled response is answered empty


class SaslPhase(enum.Enum):
    """When a connection on a SASL listener may send an API before it is authenticated (Kafka's
    SaslServerAuthenticator states); any other API closes the connection."""

    HANDSHAKE = "before its SaslHandshake"
    AUTHENTICATE = "after its SaslHandshake"


@dataclass(frozen=True, slots=True)
class Handler:
    api_key: int
    name: str  # the handler's name, as in metrics and fault rules: "produce", "init_producer_id"
    api_name: str  # Kafka's name for the API: "Produce", "InitProducerId"
    min_version: int
    max_version: int
    handle: HandleFn
    client_throttles_from: int | None = None  # KIP-219: first version whose client waits by itself
    byte_rate: ByteRate | None = None
    # The response a byte-rate throttle leaves, from the handler's body (ByteRate.FETCH's empty one).
    throttled_body: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    sasl_phase: SaslPhase | None = None  # None: only once authenticated
    audited: bool = False  # its decisions are audit events (minibroker.audit)

    def client_throttles(self, version: int) -> bool:
        """Whether a client honours throttle_time in this version's response itself (else the broker
        holds the response back). Kafka's shouldClientThrottle; APIs that never throttle themselves
        keep Kafka's AbstractResponse default, False."""
        return self.client_throttles_from is not None and version >= self.client_throttles_from


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
    "consumer_group_heartbeat",
    "consumer_group_describe",
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
        assert api_key not in REGISTRY, f"api {api_key} registered twice"
        REGISTRY[api_key] = Handler(
            api_key, fn.__name__, api_name(api_key), low, high, fn,
            client_throttles_from=client_throttles_from, byte_rate=byte_rate, throttled_body=throttled_body,
            sasl_phase=sasl_phase, audited=audited,
        )
        return fn

    return register


def load_all() -> dict[int, Handler]:
    for module in MODULES:
        importlib.import_module(f"{__name__}.{module}")
    return REGISTRY
