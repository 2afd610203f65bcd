"""The broker's own topics are the broker's: clients may read them, never produce to or delete them
(Kafka's ReplicaManager: "Cannot append to internal topic", INVALID_TOPIC_EXCEPTION), and Metadata
marks only Kafka's internal topics is_internal. The audit topic stays consumable by any client."""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer, TopicPartition

from minibroker.admin_client import AdminClient
from minibroker.testing import running_broker
from minibroker.protocol.records import encode_batch
from tests.support.batches import make_batch
from tests.support.wire import produced

INVALID_TOPIC_EXCEPTION = 17


def _produce(c, topic: str, version: int = 9):
    return produced(c, topic, make_batch([(b"forged", b"value")]), version=version)


@pytest.mark.parametrize("topic", ["__consumer_offsets", "__minibroker_audit"])
def test_produce_to_a_broker_topic_is_refused_and_appends_nothing(tmp_path, topic):
    with running_broker(tmp_path / "data", audit_enable="true") as broker:
        with AdminClient(broker.bootstrap) as c:
            _produce(c, "ordinary")  # unknown topic: an audit event all the same
            broker.in_broker(broker.broker.audit.flush, 1_700_000_000_000)  # creates the audit topic
            before = broker.in_broker(lambda: broker.broker.logs.log(topic, 0).log_end_offset)
            refused = _produce(c, topic)
            assert refused.error_code == INVALID_TOPIC_EXCEPTION
            assert refused.error_message == f"Cannot append to internal topic {topic}"
            assert broker.in_broker(lambda: broker.broker.logs.log(topic, 0).log_end_offset) == before


def test_a_forged_offset_commit_record_cannot_reach_the_offsets_log(tmp_path):
    """The failure this guards against: a record produced into __consumer_offsets rewrote a group's
    committed offset after a restart. It is refused, so the committed offset survives."""
    data = tmp_path / "data"
    from minibroker.storage.group_records import OffsetAndMetadata, offset_key, offset_value
    with running_broker(data) as broker:
        with AdminClient(broker.bootstrap) as c:
            c.call(19, {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1,
                                    "assignments": (), "configs": ()}], "timeout": 5000, "validate_only": False})
            c.call(8, {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                       "group_instance_id": None, "retention_time_ms": -1,
                       "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 42,
                                                                "committed_leader_epoch": -1,
                                                                "committed_metadata": ""}]}]}, version=8)
            forged = encode_batch([(offset_key("g", "t", 0), offset_value(OffsetAndMetadata(0, -1, "", 0)))], 0)
            response = c.call(0, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
                {"name": "__consumer_offsets", "partition_data": [{"index": 0, "records": forged}]}]}, version=9)
            assert response.responses[0].partition_responses[0].error_code == INVALID_TOPIC_EXCEPTION
    with running_broker(data) as broker:
        assert broker.broker.groups.store.offsets["g"][("t", 0)].offset == 42


def test_delete_topics_refuses_broker_topics_and_deletes_the_rest(tmp_path):
    with running_broker(tmp_path / "data") as broker:
        with AdminClient(broker.bootstrap) as c:
            c.call(19, {"topics": [{"name": "mine", "num_partitions": 1, "replication_factor": 1,
                                    "assignments": (), "configs": ()}], "timeout": 5000, "validate_only": False})
            response = c.call(20, {"topic_names": ["__consumer_offsets", "mine"], "timeout": 5000}, version=3)
            codes = {r.name: (r.error_code) for r in response.responses}
            assert codes == {"__consumer_offsets": INVALID_TOPIC_EXCEPTION, "mine": 0}
        assert broker.broker.logs.topic("__consumer_offsets") is not None
        assert (broker.data_dir / "__consumer_offsets-0").is_dir()


def test_metadata_marks_only_kafkas_internal_topics_and_the_audit_topic_is_consumable(tmp_path):
    with running_broker(tmp_path / "data", audit_enable="true") as broker:
        with AdminClient(broker.bootstrap) as c:
            c.call(19, {"topics": [{"name": "__mine", "num_partitions": 1, "replication_factor": 1,
                                    "assignments": (), "configs": ()}], "timeout": 5000, "validate_only": False})
            assert _produce(c, "__mine").error_code == 0  # '__' alone does not make a topic the broker's
            broker.in_broker(broker.broker.audit.flush, 1_700_000_000_000)
            metadata = c.call(3, {"topics": None, "allow_auto_topic_creation": False,
                                  "include_cluster_authorized_operations": False,
                                  "include_topic_authorized_operations": False}, version=9)
            internal = {t.name: t.is_internal for t in metadata.topics}
        assert internal["__consumer_offsets"] is True
        assert internal["__minibroker_audit"] is False and internal["__mine"] is False
        # Any client reads the audit stream like an ordinary topic.
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=5000)
        try:
            consumer.assign([TopicPartition("__minibroker_audit", 0)])
            consumer.seek_to_beginning()
            records = [r for r in consumer]
        finally:
            consumer.close()
        assert records and all(r.topic == "__minibroker_audit" for r in records)
