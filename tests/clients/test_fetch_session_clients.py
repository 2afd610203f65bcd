"""Real consumers over incremental fetch sessions (KIP-227, minibroker.fetch_sessions) while a partition
is added (CreatePartitions): kafka-python 3 opens a session and goes on incrementally, adding the new
partition to it; librdkafka 2.16 (confluent-kafka) and aiokafka 0.14 never ask for a session
(session epoch -1: sessionless full fetches), which the broker serves as before. Each consumer
subscribes in a group, reads what is there, sees the topic grow from 2 to 3 partitions (metadata
refresh, rebalance) and reads the records produced to the new partition.

A leader change inside a session (the partition's NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH
errors, after which the client fetches it from the new leader) needs a second broker: the cluster's
tests run tests.support.fetch_session_consumers.consume_across_a_change with a leader move as the
change."""

from __future__ import annotations

import pytest

from minibroker.admin_client import AdminClient
from tests.support.fetch_session_consumers import CONSUMERS, add_partition, consume_across_a_change
from tests.support.txn_wire import create


@pytest.mark.parametrize("client", sorted(CONSUMERS))
def test_consume_across_a_partition_added(broker, unique, client):
    topic, group = unique("fsa"), unique("fsg")
    sessions = broker.broker.fetch_sessions
    with AdminClient(broker.bootstrap) as c:
        create(c, topic, 2)
    created, incremental = sessions.cache.created, sessions.incremental_fetches
    seen = consume_across_a_change(broker.bootstrap, topic, group, client, lambda c: add_partition(c, topic, 3), 2)
    assert sorted(k for p, k in seen if p == 2) == [b"new-0", b"new-1", b"new-2"]
    assert len(seen) == 9
    if client == "kafka-python":
        # It fetched over a session: one opened, incremental fetches answered.
        assert sessions.cache.created > created and sessions.incremental_fetches > incremental
    else:
        assert sessions.incremental_fetches == incremental  # sessionless full fetches throughout
