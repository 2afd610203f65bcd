"""AlterConfigs (key 33), v0-v2: the legacy, non-incremental config change: the configs given become
the resource's whole set of topic overrides (or of one level of dynamic broker configs), every key
left out is deleted. Kafka 4's Java Admin no longer sends it; kafka-python, librdkafka and the
command-line tools still do. Rules and errors: minibroker.config_admin."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.config_admin import alter_request
from minibroker.handlers import Reply, handler

if TYPE_CHECKING:
    from minibroker.context import RequestContext


@handler(33, 0, 2, client_throttles_from=1)
async def alter_configs(ctx: RequestContext, request: Any) -> Reply:
    return Reply({"responses": alter_request(ctx, request, incremental_ops=False)})
