"""A broker in process on trio's MockClock, and the frames the in-process tests send it: the quota
path and the clock are driven through Broker.handle_frame without sockets."""

from __future__ import annotations

import datetime
from kio.index import load_response_schema
from minibroker.broker import Broker
from minibroker.config import BrokerConfig
from minibroker.protocol.entities import build
from minibroker.protocol.messages import read_entity
from tests.support.batches import make_batch
from tests.support.wire import encode_request, produce_request, schema


ms = lambda n: datetime.timedelta(milliseconds=n)  # noqa: E731


TOPIC = "quota-topic"




def new_broker(tmp_path, **overrides) -> Broker:
    props = {"log.dirs": str(tmp_path / "data"), "listeners": "127.0.0.1:0"}
    props.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
    broker = Broker(BrokerConfig(props))
    broker.logs.create_topic(TOPIC, 1, {}, 0)
    return broker


def set_quota(broker: Broker, entity: list[tuple[str, str | None]], key: str, value: float | None) -> None:
    [(_, code, message)] = broker.quotas.alter([(entity, [(key, value or 0.0, value is None)])], False)
    assert code == 0, message


def produce_frame(client_id: str, value_size: int, acks: int = -1, version: int = 9, count: int = 1) -> bytes:
    """A Produce frame (without its size) of `count` records of `value_size` bytes to TOPIC."""
    records = make_batch([(None, b"v" * value_size)] * count)
    return encode_request(produce_request(TOPIC, records, version, acks), client_id=client_id)[4:]


def idempotent_produce_frame(producer_id: int, sequence: int = 0, topic: str = TOPIC, client_id: str = "clock-test",
                             version: int = 9) -> bytes:
    """A Produce of one batch of producer id `producer_id` (epoch 0) from `sequence`, to partition 0."""
    records = make_batch([(None, b"v")], producer_id=producer_id, producer_epoch=0, base_sequence=sequence)
    return encode_request(produce_request(topic, records, version), client_id=client_id)[4:]


def fetch_frame(client_id: str, offset: int, version: int = 12, max_wait: int = 0, min_bytes: int = 1) -> bytes:
    request = build(schema(1, version), {
        "replica_id": -1, "max_wait": max_wait, "min_bytes": min_bytes, "max_bytes": 50 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": (),
        "rack_id": "",
        "topics": [{"topic": TOPIC, "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
            "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
    })
    return encode_request(request, client_id=client_id)[4:]


def simple_frame(api_key: int, version: int, client_id: str, **body) -> bytes:
    return encode_request(build(schema(api_key, version), body), client_id=client_id)[4:]


def decode(frame_with_size: bytes, api_key: int, version: int):
    cls = load_response_schema(api_key, version)
    offset = 8 + (1 if cls.__flexible__ and api_key != 18 else 0)
    response, _, _unknown_tags = read_entity(cls, frame_with_size, offset)
    return response


def throttle_of(response) -> int:
    return round(response.throttle_time.total_seconds() * 1000)
