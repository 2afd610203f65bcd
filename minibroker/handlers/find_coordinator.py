"""FindCoordinator (key 10), v0-v6: this broker coordinates every group and transactional id.

v4+ batches keys in coordinator_keys and answers one Coordinator each.
"""

from minibroker.handlers import handler
from protocol.errors import ErrorCode


@handler(10, 0, 6)
async def find_coordinator(ctx, request):
    endpoint = ctx.broker.broker_endpoint(ctx.connection.listener)
    found = {"error_code": ErrorCode.none, "error_message": None, "node_id": endpoint["node_id"],
             "host": endpoint["host"], "port": endpoint["port"]}
    keys = getattr(request, "coordinator_keys", None)
    if keys is None:
        return {"throttle_time": 0, **found}
    return {"throttle_time": 0, "coordinators": [{"key": key, **found} for key in keys]}
