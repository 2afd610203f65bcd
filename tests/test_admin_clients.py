"""Admin calls from real clients' admin APIs, answered as a single-node Kafka answers them."""

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.interop


def test_confluent_list_topics_for_all_topics(broker, unique):
    """librdkafka 2.16's Metadata v13 request for all topics ends with 3 bytes beyond its schema's
    fields. Kafka ignores them; closing the connection over them fails list_topics() every time."""
    topics = [unique("listed") for _ in range(2)]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(t, 2) for t in topics], operation_timeout=10).values():
        future.result(timeout=30)
    before = broker.broker.metrics.closed_for_protocol_errors

    metadata = admin.list_topics(timeout=20)

    assert set(topics) <= set(metadata.topics)
    assert all(len(metadata.topics[t].partitions) == 2 for t in topics)
    assert list(metadata.brokers) == [broker.broker.node_id]
    assert broker.broker.metrics.closed_for_protocol_errors == before
    # The request is librdkafka's, bytes after its body included: the broker counted them.
    assert broker.broker.metrics.requests_with_trailing_bytes >= 1
