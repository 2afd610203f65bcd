"""A broker in process on trio's MockClock for the share-group tests: requests of the share APIs as
dicts through Broker.handle_frame (each "client" a Connection of its own), records produced in
batches, transactional batches and markers, and the broker's background tasks (the lock timer)
running in the test's nursery, so lock timeouts and long polls follow virtual time."""

from __future__ import annotations

import uuid
from typing import Any

import trio

from minibroker.broker import Broker
from minibroker.config import BrokerConfig
from minibroker.context import Connection
from minibroker.protocol.entities import build
from minibroker.txn_markers import TxnMarker
from tests.support.batches import make_batch
from tests.support.broker_shell import decode
from tests.support.wire import encode_request, schema

VERSIONS = {57: 1, 76: 1, 77: 1, 78: 2, 79: 2, 90: 1, 91: 0, 92: 0, 44: 1, 32: 4, 18: 4, 16: 5, 42: 2, 3: 12}


class ShareShell:
    def __init__(self, tmp_path, topic: str = "t", partitions: int = 1, **overrides: Any) -> None:
        props = {"log.dirs": str(tmp_path / "data"), "listeners": "127.0.0.1:0"}
        props.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
        self.props = props
        self.broker = Broker(BrokerConfig(props))
        self.topic = topic
        if self.broker.logs.topic(topic) is None:
            self.broker.logs.create_topic(topic, partitions, {}, self.broker.clock.now_ms())
        self.topic_id: uuid.UUID = self.broker.logs.topic(topic).topic_id
        self._connections: dict[str, Connection] = {}

    def connection(self, name: str) -> Connection:
        if name not in self._connections:
            self._connections[name] = self.broker.new_connection(name)
        return self._connections[name]

    def disconnect(self, name: str) -> None:
        self.broker.connection_closed(self._connections.pop(name))

    async def call(self, api_key: int, body: dict[str, Any], client: str = "client", version: int | None = None):
        version = VERSIONS[api_key] if version is None else version
        frame = encode_request(build(schema(api_key, version), body), client_id=client)[4:]
        response = await self.broker.handle_frame(frame, self.connection(client))
        return decode(response.data, api_key, version)

    def produce(self, values: list[bytes], partition: int = 0, **batch: Any) -> int:
        """One batch of `values` appended; the offset of its first record."""
        log = self.broker.logs.log(self.topic, partition)
        batch.setdefault("timestamp_ms", self.broker.clock.now_ms())
        records = make_batch([(None, v) for v in values], **batch)
        from minibroker.protocol.records import read_header

        outcome = self.broker.append_checked(self.topic, partition, log, read_header(records), records,
                                             self.broker.clock.now_ms())
        assert outcome.error_code == 0, outcome
        return outcome.base_offset

    def marker(self, producer_id: int, commit: bool, partition: int = 0) -> None:
        [result] = self.broker.write_txn_markers([TxnMarker(producer_id, 0, 0, commit, [(self.topic, partition)])])
        assert result[(self.topic, partition)] == 0

    async def set_group_config(self, group: str, **configs: str) -> None:
        result = await self.call(44, {"resources": [{"resource_type": 32, "resource_name": group, "configs": [
            {"name": k.replace("_", "."), "config_operation": 0, "value": v} for k, v in configs.items()]}],
            "validate_only": False})
        assert result.responses[0].error_code == 0, result.responses[0].error_message

    async def heartbeat(self, group: str, member: str, epoch: int = 0, topics: list[str] | None = None,
                        client: str | None = None):
        return await self.call(76, {"group_id": group, "member_id": member, "member_epoch": epoch, "rack_id": None,
                                    "subscribed_topic_names": topics if topics is not None or epoch != 0 else [self.topic]},
                               client or member)

    async def fetch(self, group: str, member: str, epoch: int, *, partitions=(0,), acks=None, max_wait: int = 0,
                    max_records: int = 500, batch_size: int = 500, client: str | None = None, forget=(),
                    mode: int = 0, renew: bool = False, max_bytes: int = 1 << 20, min_bytes: int = 1):
        """A ShareFetch of `partitions` with `acks` {partition: [(first, last, [types])]}."""
        acks = acks or {}
        parts = sorted(set(partitions) | set(acks))
        return await self.call(78, {
            "group_id": group, "member_id": member, "share_session_epoch": epoch, "max_wait": max_wait,
            "min_bytes": min_bytes, "max_bytes": max_bytes, "max_records": max_records, "batch_size": batch_size,
            "share_acquire_mode": mode, "is_renew_ack": renew,
            "topics": [{"topic_id": self.topic_id, "partitions": [
                {"partition_index": p, "acknowledgement_batches": [
                    {"first_offset": f, "last_offset": last, "acknowledge_types": list(types)}
                    for f, last, types in acks.get(p, [])]} for p in parts]}] if parts else [],
            "forgotten_topics_data": [{"topic_id": self.topic_id, "partitions": list(forget)}] if forget else []},
            client or member)

    async def acknowledge(self, group: str, member: str, epoch: int, acks: dict, client: str | None = None,
                          renew: bool = False):
        return await self.call(79, {
            "group_id": group, "member_id": member, "share_session_epoch": epoch, "is_renew_ack": renew,
            "topics": [{"topic_id": self.topic_id, "partitions": [
                {"partition_index": p, "acknowledgement_batches": [
                    {"first_offset": f, "last_offset": last, "acknowledge_types": list(types)}
                    for f, last, types in batches]} for p, batches in acks.items()]}]},
            client or member)


def acquired(response, partition: int = 0) -> list[tuple[int, int, int]]:
    """(first, last, delivery count) of the records a ShareFetch response acquired in `partition`."""
    return [(a.first_offset, a.last_offset, a.delivery_count)
            for t in response.responses for p in t.partitions if p.partition_index == partition
            for a in p.acquired_records]


def partition_of(response, partition: int = 0):
    found = [p for t in response.responses for p in t.partitions if p.partition_index == partition]
    return found[0] if found else None


async def with_background(shell: ShareShell, test) -> None:
    """Run `test()` with the broker's background tasks going (the lock timer), then stop them."""
    async with trio.open_nursery() as nursery:
        shell.broker.run(nursery)
        await test()
        nursery.cancel_scope.cancel()
