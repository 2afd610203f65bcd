"""The producer-id quota (KIP-936) in a live broker, over SASL principals.

alice is limited to a small producer_ids_rate; bob is not. New producer ids beyond alice's rate are
rejected before anything is appended (no log data, no producer state) with THROTTLING_QUOTA_EXCEEDED
and a throttle time; producer ids the quota already knows keep producing; bob is untouched. Then
what each real client does with the rejection, which the README's table reports.
"""

import pytest

from minibroker.admin_client import AdminClient
from protocol.entities import to_ms
from protocol.records import encode_batch
from tests.clients import ALL, Message

pytestmark = pytest.mark.interop

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
# A 2 x 10 s window: alice's bucket holds rate * 20 producer ids, refilled at `rate` per second.
WINDOW = {"producer_id_quota_window_num": "2", "producer_id_quota_window_size_seconds": "10"}


def client_for(broker, user):
    return AdminClient(broker.sasl_bootstrap, sasl_mechanism="PLAIN", sasl_username=user,
                       sasl_password=USERS[user])


def set_rate(broker, user, rate):
    with AdminClient(broker.bootstrap) as admin:
        response = admin.call(49, {"entries": [{"entity": [{"entity_type": "user", "entity_name": user}],
                                                "ops": [{"key": "producer_ids_rate", "value": float(rate), "remove": False}]}],
                                   "validate_only": False})
        assert response.entries[0].error_code == 0


def create_topic(broker, topic):
    with AdminClient(broker.bootstrap) as admin:
        response = admin.call(19, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                                               "assignments": (), "configs": ()}],
                                   "timeout": 5000, "validate_only": False})
        assert response.topics[0].error_code == 0


def fresh_producer_sends(broker, user, topic, sequence=0, pid=None):
    """A new idempotent producer (own connection, own PID) sends one record: (error, throttle, pid)."""
    with client_for(broker, user) as c:
        if pid is None:
            init = c.call(22, {"transactional_id": None, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1})
            assert init.error_code == 0
            pid = init.producer_id
        batch = encode_batch([(b"k", b"v")], 1_700_000_000_000, producer_id=pid, producer_epoch=0, base_sequence=sequence)
        response = c.call(0, {"transactional_id": None, "acks": -1, "timeout": 5000,
                              "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}, version=9)
    partition = response.responses[0].partition_responses[0]
    return int(partition.error_code), to_ms(response.throttle_time), pid


def test_new_pids_beyond_the_rate_are_rejected_known_ones_and_other_users_are_not(unique, tmp_path):
    from minibroker.testing import running_broker

    topic = unique("pidq")
    with running_broker(tmp_path / "data", sasl_users=USERS, **WINDOW) as broker:
        create_topic(broker, topic)
        set_rate(broker, "alice", 1)  # bucket: 20 new PIDs, then one per second
        outcomes = [fresh_producer_sends(broker, "alice", topic) for _ in range(40)]
        accepted = [pid for code, _, pid in outcomes if code == 0]
        rejected = [(code, throttle) for code, throttle, _ in outcomes if code != 0]
        assert 20 <= len(accepted) < 40 and rejected
        assert all(code == 89 and throttle > 0 for code, throttle in rejected)
        log = broker.broker.logs.log(topic, 0)
        assert log.log_end_offset == len(accepted)  # nothing of a rejected batch was appended
        assert broker.broker.producer_states.entry_count == len(accepted)  # nor any state created
        # A producer id the quota knows is never throttled by it, even with alice over her rate.
        assert fresh_producer_sends(broker, "alice", topic, sequence=1, pid=accepted[0])[0] == 0
        # bob has no producer-id quota: every new producer id goes through.
        assert all(fresh_producer_sends(broker, "bob", topic)[0] == 0 for _ in range(30))


SASL = {
    "kafka-python": {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                     "sasl_plain_username": "alice", "sasl_plain_password": USERS["alice"],
                     "request_timeout_ms": 10000, "retry_backoff_ms": 200},
    "confluent-kafka": {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                        "sasl.username": "alice", "sasl.password": USERS["alice"], "message.timeout.ms": 10000},
    "aiokafka": {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                 "sasl_plain_username": "alice", "sasl_plain_password": USERS["alice"], "request_timeout_ms": 10000},
}
# What the application sees when its new producer id is over the user's rate (README table).
REACTION = {"kafka-python": "retried until admitted", "confluent-kafka": "THROTTLING_QUOTA_EXCEEDED", "aiokafka": "UnknownError"}


@pytest.mark.parametrize("client", ALL, ids=lambda c: c.name)
def test_what_each_client_does_when_its_new_pid_is_throttled(client, unique, tmp_path):
    from minibroker.testing import running_broker

    topic = unique("pidq-client")
    window = {**WINDOW, "producer_id_quota_window_size_seconds": "5"}
    with running_broker(tmp_path / "data", sasl_users=USERS, **window) as broker:
        create_topic(broker, topic)
        set_rate(broker, "alice", 1)  # bucket of 2 x 5 x 1 = 10; then one PID a second
        admitted = 0
        while fresh_producer_sends(broker, "alice", topic)[0] == 0:  # until alice is over her rate
            admitted += 1
            assert admitted <= 12, "the producer-id quota never throttled"
        log = broker.broker.logs.log(topic, 0)
        assert log.log_end_offset == admitted
        messages = [Message(0, b"k", b"v", ())]
        if REACTION[client.name] == "retried until admitted":
            client.produce(broker.sasl_bootstrap, topic, messages, **SASL[client.name])
            assert log.log_end_offset == admitted + 1
        else:
            with pytest.raises(Exception) as info:
                client.produce(broker.sasl_bootstrap, topic, messages, **SASL[client.name])
            assert REACTION[client.name] in f"{type(info.value).__name__} {info.value}"
            assert log.log_end_offset == admitted
