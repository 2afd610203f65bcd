"""The broker's audit stream records each decision with the quota that caused its throttle: a fetch
held back by consumer_byte_rate appears with its throttle, that quota's name and no bytes; produce
and InitProducerId decisions appear with their producer ids."""

from minibroker.admin_client import AdminClient
from minibroker.testing import running_broker
from minibroker.pipeline.segments import iter_audit_events
from minibroker.protocol.errors import ErrorCode
from minibroker.protocol.records import encode_batch


def test_audit_records_fetch_throttles_and_producer_ids(tmp_path, unique):
    topic = unique("audited")
    data_dir = tmp_path / "data"
    with running_broker(data_dir, audit_enable="true", quota_window_num="2") as broker:
        with AdminClient(broker.bootstrap, client_id="greedy") as c:
            c.call(19, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                                    "assignments": (), "configs": ()}], "timeout": 5000, "validate_only": False})
            init = c.call(22, {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1})
            batch = encode_batch([(b"k", b"x" * 5000)] * 4, 1_700_000_000_000, producer_id=init.producer_id,
                                 producer_epoch=0, base_sequence=0)
            c.call(0, {"transactional_id": None, "acks": -1, "timeout": 5000,
                       "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}, version=9)
            c.call(49, {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": "greedy"}],
                                     "ops": [{"key": "consumer_byte_rate", "value": 1000.0, "remove": False}]}],
                        "validate_only": False})
            topic_id = broker.broker.logs.topic(topic).topic_id
            fetch = {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                     "session_id": 0, "session_epoch": -1, "forgotten_topics_data": (), "rack_id": "",
                     "topics": [{"topic_id": topic_id, "partitions": [{
                         "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                         "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}
            throttled = c.call(1, fetch, version=16)
            assert throttled.throttle_time.total_seconds() > 0 and not throttled.responses
    events = [event for _, event in iter_audit_events(data_dir)]
    (init_event,) = [e for e in events if e["api"] == "InitProducerId"]
    assert init_event["producer_id"] == init.producer_id and init_event["client_id"] == "greedy"
    (produce_event,) = [e for e in events if e["api"] == "Produce"]
    assert (produce_event["records"], produce_event["producer_id"], produce_event["error_code"]) == (4, init.producer_id, 0)
    (fetch_event,) = [e for e in events if e["api"] == "Fetch"]
    assert fetch_event["throttle_quota"] == "consumer_byte_rate" and fetch_event["throttle_time_ms"] > 0
    assert fetch_event["bytes"] == 0 and fetch_event["records"] == 0


def test_audit_records_the_quota_configuration_at_start_and_at_each_change(tmp_path):
    """A start event with every configured entity and the window settings; one event per
    AlterClientQuotas that altered something, naming the requester, in order with the decisions;
    nothing for validate_only or a refused entry; a restart records the configuration again."""
    data_dir = tmp_path / "data"
    window = {"producer_id_quota_window_size_seconds": "60", "producer_id_quota_cache_layer_count": "3"}
    alice = [{"entity_type": "user", "entity_name": "alice"}]
    default_user = [{"entity_type": "user", "entity_name": None}]
    with running_broker(data_dir, audit_enable="true", **window) as broker:
        with AdminClient(broker.bootstrap, client_id="operator") as c:
            def alter(entries, validate_only=False):
                return c.call(49, {"entries": entries, "validate_only": validate_only})

            alter([{"entity": alice, "ops": [{"key": "producer_ids_rate", "value": 2.5, "remove": False}]},
                   {"entity": default_user, "ops": [{"key": "producer_ids_rate", "value": 10.0, "remove": False}]}])
            alter([{"entity": alice, "ops": [{"key": "producer_ids_rate", "value": 99.0, "remove": False}]}],
                  validate_only=True)
            refused = alter([{"entity": alice, "ops": [{"key": "producer_ids_rate", "value": -1.0, "remove": False}]}])
            assert [e.error_code for e in refused.entries] == [ErrorCode.invalid_request]
            c.call(22, {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1})
            alter([{"entity": alice, "ops": [{"key": "producer_ids_rate", "value": 0.0, "remove": True}]}])
    with running_broker(data_dir, audit_enable="true", producer_id_quota_window_size_seconds="120"):
        pass
    events = [event for _, event in iter_audit_events(data_dir)]
    assert [e["api"] for e in events] == [
        "QuotaConfig", "AlterClientQuotas", "InitProducerId", "AlterClientQuotas", "QuotaConfig"
    ]
    start, first, _, removal, restart = events
    settings = start["quota_settings"]
    assert settings["producer.id.quota.window.size.seconds"] == 60 and settings["producer.id.quota.cache.layer.count"] == 3
    assert settings["producer.id.quota.cache.false.positive.rate"] == 0.001 and settings["quota.window.num"] == 11
    assert (start["quotas"], start["principal"], start["api_key"]) == ([], "", -1)
    assert (first["principal"], first["client_id"], first["api_key"]) == ("User:ANONYMOUS", "operator", 49)
    assert first["quotas"] == [{"entity": {"user": "alice"}, "values": {"producer_ids_rate": 2.5}},
                               {"entity": {"user": None}, "values": {"producer_ids_rate": 10.0}}]
    assert removal["quotas"] == [{"entity": {"user": "alice"}, "values": {}}]
    assert restart["quotas"] == [{"entity": {"user": None}, "values": {"producer_ids_rate": 10.0}}]
    assert restart["quota_settings"]["producer.id.quota.window.size.seconds"] == 120
    assert start["ts"] <= first["ts"] <= removal["ts"] <= restart["ts"]
