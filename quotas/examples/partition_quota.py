"""Quotas proportional to the partitions a client uses that this broker leads (KIP-257,
scenario 2).

"Rather than allocate a fixed quota for these clients on each broker, it will be useful to have
quotas that are proportional to the number of partitions used by the client that are hosted on the
broker. Since partition leaders may change dynamically, it will be better to compute quotas at
runtime." Settings::

    client.quota.callback.class=minibroker.quotas.examples.partition_quota:PartitionQuotaCallback
    client.quota.callback.partition.topics.alice=orders|orders-.*   # the topics alice's clients use
    client.quota.callback.partition.scope=partition                 # or: cluster

``client.quota.callback.partition.topics.<user>`` is a regular expression (full match) naming the
topics a user's clients use; users without one keep Kafka's plain quotas. Quotas are set as usual
(``producer_byte_rate`` / ``consumer_byte_rate`` on the user, client id, or a pair, with Kafka's
precedence); this callback scales the value that applies, for PRODUCE and FETCH (request time is CPU,
not per partition, and stays as set, as in Kafka's own partition-based test callback). With ``n`` =
partitions of the user's topics whose leader is this broker (``node.id``) and ``N`` = all of them:

- ``scope=partition`` (default): the value is per partition: limit = value * max(n, 1). A user with
  4 partitions here gets 4 times the value here; a broker leading none of them still grants one
  partition's worth, so metadata and the odd request are not starved.
- ``scope=cluster``: the value is the user's total across the cluster, shared out by leadership:
  limit = value * n / N (value / N when n = 0; the value itself while N = 0), Kafka's
  ``GroupedUserQuotaCallback`` arithmetic. With one broker leading everything, n = N and the limit
  is the value.

The counts are recomputed in ``update_cluster_metadata``, which every broker of a cluster calls at
start and on each metadata change to topics, partitions or brokers anywhere in the cluster: a topic
created (CreateTopics, auto-creation), grown (CreatePartitions) or deleted, and every leader change
(a leader moved, a broker stopped or started, ElectLeaders, a reassignment). Each broker's callback
sees the whole cluster and counts what its own broker (``node.id``) leads. It returns True when any
user's counts changed, and the broker then re-reads every live quota's limit (Kafka's
``updateQuotaMetricConfigs``), so a client's limit follows its topics and their leaders without a
quota change.

A mapped user's sensors carry one more tag, ``partitions-of: <user>``, so the limit can be computed
from the tags alone even where Kafka's precedence would tag by client id only; each mapped user
therefore has its own sensors.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from minibroker.quotas.callback import DefaultQuotaCallback, QuotaType
from minibroker.quotas.cluster import Cluster

__all__ = ["PARTITIONS_TAG", "PartitionQuotaCallback", "SCOPE_CONFIG", "TOPICS_CONFIG_PREFIX"]

TOPICS_CONFIG_PREFIX: Final = "client.quota.callback.partition.topics."
SCOPE_CONFIG: Final = "client.quota.callback.partition.scope"
SCOPES: Final = ("partition", "cluster")
PARTITIONS_TAG: Final = "partitions-of"
SCALED_TYPES: Final = frozenset({QuotaType.PRODUCE, QuotaType.FETCH})


class PartitionQuotaCallback(DefaultQuotaCallback):
    """Byte-rate limits scaled by the partitions of a user's topics this broker leads."""

    def __init__(self) -> None:
        super().__init__()
        self.node_id = 1
        self.scope = "partition"
        self.topics: dict[str, re.Pattern[str]] = {}  # user -> the topics its clients use
        # user -> (partitions led here, all partitions) of its topics; empty until the first cluster.
        self.counts: dict[str, tuple[int, int]] = {}

    def configure(self, configs: Mapping[str, Any]) -> None:
        try:
            self.node_id = int(configs.get("node.id", 1))
        except ValueError:
            raise ValueError(f"node.id: {configs.get('node.id')!r} is not an integer") from None
        self.scope = str(configs.get(SCOPE_CONFIG, "partition")).strip()
        if self.scope not in SCOPES:
            raise ValueError(f"{SCOPE_CONFIG}: {self.scope!r} is not one of {', '.join(SCOPES)}")
        for key in sorted(configs):
            if key.startswith(TOPICS_CONFIG_PREFIX):
                user = key[len(TOPICS_CONFIG_PREFIX):]
                if not user:
                    raise ValueError(f"{key}: a user name must follow {TOPICS_CONFIG_PREFIX!r}")
                try:
                    self.topics[user] = re.compile(str(configs[key]))
                except re.error as exc:
                    raise ValueError(f"{key}: {configs[key]!r} is not a regular expression: {exc}") from None

    def update_cluster_metadata(self, cluster: Cluster) -> bool:
        counts = {}
        for user, pattern in self.topics.items():
            here = total = 0
            for topic in cluster.topics():
                if pattern.fullmatch(topic):
                    for info in cluster.partitions_for_topic(topic):
                        total += 1
                        here += info.leader == self.node_id
            counts[user] = (here, total)
        changed = counts != self.counts
        self.counts = counts
        return changed

    def multiplier(self, user: str) -> float:
        """What the configured value is multiplied by for `user` on this broker."""
        here, total = self.counts.get(user, (0, 0))
        if self.scope == "partition":
            return float(max(here, 1))
        if total == 0:
            return 1.0
        return (here or 1) / total

    def quota_metric_tags(self, quota_type: QuotaType, principal: str, client_id: str) -> dict[str, str]:
        tags = super().quota_metric_tags(quota_type, principal, client_id)
        if quota_type in SCALED_TYPES and principal in self.topics:
            tags[PARTITIONS_TAG] = principal
        return tags

    def quota_limit(self, quota_type: QuotaType, metric_tags: Mapping[str, str]) -> float | None:
        value = super().quota_limit(quota_type, metric_tags)
        user = metric_tags.get(PARTITIONS_TAG)
        if value is None or user is None or quota_type not in SCALED_TYPES:
            return value
        return value * self.multiplier(user)
