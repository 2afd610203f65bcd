"""IncrementalAlterConfigs (key 44), v0-v1: SET, DELETE, APPEND and SUBTRACT on topic and broker
configs, applied live and kept across restarts (minibroker.config_admin has the rules and Kafka's
errors; one result per resource, all of a resource's operations or none)."""

from minibroker.config_admin import alter_request
from minibroker.handlers import handler


@handler(44, 0, 1)
async def incremental_alter_configs(ctx, request):
    return {"throttle_time": 0, "responses": alter_request(ctx.broker, request, incremental_ops=True)}
