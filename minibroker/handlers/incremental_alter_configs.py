"""IncrementalAlterConfigs (key 44), v0-v1: SET, DELETE, APPEND and SUBTRACT on topic and broker
configs, applied live and kept across restarts (minibroker.config_admin has the rules and Kafka's
errors; one result per resource, all of a resource's operations or none)."""

from minibroker.config_admin import alter_resources, incremental
from minibroker.handlers import handler


@handler(44, 0, 1)
async def incremental_alter_configs(ctx, request):
    resources = [
        (
            r.resource_type,
            r.resource_name,
            [c.name for c in r.configs],
            [c.name for c in r.configs if c.value is None and c.config_operation != 1],
            incremental([(c.name, c.config_operation, c.value) for c in r.configs]),
        )
        for r in request.resources
    ]
    results = alter_resources(ctx.broker, resources, bool(request.validate_only))
    return {"throttle_time": 0, "responses": results}
