"""Example quota callbacks (KIP-257): the KIP's two scenarios, built on the public
`quotas.callback.ClientQuotaCallback` interface and ready to use with `client.quota.callback.class`.

- `minibroker.quotas.examples.group_quota:GroupQuotaCallback`: scenario 1, a quota group: several users and
  client ids share one quota.
- `minibroker.quotas.examples.partition_quota:PartitionQuotaCallback`: scenario 2, a quota proportional to the
  partitions a client uses that this broker leads, recomputed from `update_cluster_metadata`.

Each module's docstring shows its settings. Both extend `DefaultQuotaCallback`, so clients outside
their scope keep Kafka's <user, client-id> precedence, and their quotas are set with the usual tools
(AlterClientQuotas, `minibroker configs`). Their own settings live under `client.quota.callback.`
(the broker hands every setting to `configure`, and does not warn about keys under that prefix).
Like the rest of `quotas/`, they are pure: no I/O, no clock.
"""
