"""GetTelemetrySubscriptions (key 71), v0: which metrics a client pushes, and how often (KIP-714).

A client instance id is assigned to a client that sends the zero id; the answer is built from the
CLIENT_METRICS subscriptions the client matches (minibroker.telemetry): the metric prefixes, the
shortest push interval, the subscription id, the accepted compression types (zstd, lz4, gzip,
snappy), telemetry.max.bytes and delta temporality, as Kafka answers. A second request before the
push interval has passed is THROTTLING_QUOTA_EXCEEDED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.handlers import Reply, handler

if TYPE_CHECKING:
    from minibroker.context import RequestContext


def selectors(ctx: RequestContext) -> dict[str, str]:
    """The client's match selectors (Kafka's ClientMetricsInstanceMetadata)."""
    conn = ctx.connection
    address, _, port = conn.peer.rpartition(":")
    return {"client_id": ctx.client_id, "client_software_name": conn.software_name,
            "client_software_version": conn.software_version, "client_source_address": address,
            "client_source_port": port}


@handler(71, 0, 0)
async def get_telemetry_subscriptions(ctx: RequestContext, request: Any) -> Reply:
    return Reply(ctx.client_metrics.get_subscriptions(request.client_instance_id, selectors(ctx),
                                                         ctx.clock.now_ms()))
