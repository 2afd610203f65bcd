"""FindCoordinator (key 10), v0-v6: this broker coordinates every group and transactional id.

v4+ batches keys in coordinator_keys and answers one Coordinator each.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.handlers import Reply, handler
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from minibroker.broker import RequestContext


@handler(10, 0, 6, client_throttles_from=2)
async def find_coordinator(ctx: RequestContext, request: Any) -> Reply:
    endpoint = ctx.broker.broker_endpoint(ctx.connection.listener)
    found = {"error_code": ErrorCode.none, "error_message": None, "node_id": endpoint["node_id"],
             "host": endpoint["host"], "port": endpoint["port"]}
    keys = getattr(request, "coordinator_keys", None)
    if keys is None:
        return Reply({**found})
    return Reply({"coordinators": [{"key": key, **found} for key in keys]})
