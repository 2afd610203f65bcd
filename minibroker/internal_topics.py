"""How Kafka's internal topics are created on this broker's cluster: `__consumer_offsets`,
`__transaction_state` and `__share_group_state` take their own replication factors and
min.insync.replicas (Kafka's offsets.topic.replication.factor, transaction.state.log.replication.factor
and transaction.state.log.min.isr, share.coordinator.state.topic.replication.factor and
share.coordinator.state.topic.min.isr), not default.replication.factor.

Kafka 4.4 refuses to create such a topic on a cluster with fewer brokers registered than its factor
(INVALID_REPLICATION_FACTOR; FindCoordinator answers COORDINATOR_NOT_AVAILABLE and the creation is
tried again at the next request), which is why every single-broker Kafka configuration sets them to 1.
Here a factor left at its default (3) is capped at the brokers of the cluster, and a min.insync.replicas
left at its default (2) at the factor, so a single broker works at its defaults; a value set
explicitly is Kafka's rule, refusal included (docs/differences.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from minibroker.storage.controller import InternalTopic
from minibroker.storage.offsets_store import TOPIC as OFFSETS_TOPIC
from minibroker.storage.share_state import TOPIC as SHARE_STATE_TOPIC
from minibroker.storage.transaction_store import TOPIC as TRANSACTIONS_TOPIC

if TYPE_CHECKING:
    from minibroker.config import BrokerConfig
    from minibroker.storage.controller import Controller

__all__ = ["configure_internal_topics", "internal_topics"]

# topic -> (its replication factor's key, its min.insync.replicas' key or None)
KEYS = {
    OFFSETS_TOPIC: ("offsets.topic.replication.factor", None),
    TRANSACTIONS_TOPIC: ("transaction.state.log.replication.factor", "transaction.state.log.min.isr"),
    SHARE_STATE_TOPIC: ("share.coordinator.state.topic.replication.factor", "share.coordinator.state.topic.min.isr"),
}


def internal_topics(config: BrokerConfig) -> dict[str, InternalTopic]:
    """Each internal topic's creation settings from the broker's config (a key absent from the
    properties is at its default, so capped)."""
    found = {}
    for topic, (factor_key, min_isr_key) in KEYS.items():
        found[topic] = InternalTopic(
            config[factor_key], factor_key not in config.props,
            config[min_isr_key] if min_isr_key is not None else None,
            min_isr_key is None or min_isr_key not in config.props)
    return found


def configure_internal_topics(controller: Controller, config: BrokerConfig) -> None:
    controller.internal_topics = internal_topics(config)
