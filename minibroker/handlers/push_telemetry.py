"""PushTelemetry (key 72), v0: a client's own metrics, OpenTelemetry MetricsData, possibly
compressed (KIP-714). Checked and kept by minibroker.telemetry (Kafka's ClientMetricsManager checks
and error codes), shown on the metrics endpoint with the client's id and instance id as labels. Its
Kafka 4.4 clients throttle themselves (AbstractResponse's default: the response has a throttle
time)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.handlers import Reply, handler
from minibroker.handlers.get_telemetry_subscriptions import selectors

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(72, 0, 0)
async def push_telemetry(ctx: RequestContext, request: Any) -> Reply:
    metrics = ctx.client_metrics
    code, _message = metrics.push(request.client_instance_id, request.subscription_id, request.terminating,
                                  request.compression_type, request.metrics or b"", selectors(ctx),
                                  ctx.clock.now_ms())
    instance = metrics.instances.get(request.client_instance_id)
    if instance is not None:
        instance.selectors["client_id"] = ctx.client_id
    return Reply({"error_code": code})
