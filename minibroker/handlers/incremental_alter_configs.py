"""IncrementalAlterConfigs (key 44), v0-v1: SET, DELETE, APPEND and SUBTRACT on topic and broker
configs, applied live and kept across restarts (minibroker.config_admin has the rules and Kafka's
errors; one result per resource, all of a resource's operations or none)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.config_admin import alter_request
from minibroker.handlers import Reply, handler

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(44, 0, 1, client_throttles_from=1)
async def incremental_alter_configs(ctx: RequestContext, request: Any) -> Reply:
    return Reply({"responses": alter_request(ctx, request, incremental_ops=True)})
