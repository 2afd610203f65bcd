"""The group-type registry (minibroker.groups.types): a third group type, defined in tests only
(tests/support/lease_groups.py, "lease" groups), plugs into the coordinator through the registry,
without an edit of the classic or consumer group modules, and the coordinator's type-agnostic parts
treat it as they treat the two built-in types: its groups are loaded from its own records in
`__consumer_offsets` after a restart, its timers fire through the timer task on the broker clock,
ListGroups lists it with its type (and filters by it), DeleteGroups deletes it (tombstoning its
records), and the offsets requests are its groups' to answer. One group id is one type: the classic
and consumer protocols cannot take a lease group's id, nor the lease type a classic group's.
"""

from __future__ import annotations

import pytest
import trio
from kio.index import load_request_schema

from minibroker.broker import Broker
from minibroker.clock import BrokerClock
from minibroker.config import BrokerConfig
from minibroker.context import Connection
from minibroker.groups.api import ConsumerGroupHeartbeatRequest, GroupConfig, GroupOverview
from minibroker.groups.coordinator import GroupCoordinator
from minibroker.groups.types import GroupTypes
from minibroker.protocol.entities import build
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.config import LogConfig
from minibroker.storage.manager import LogManager
from minibroker.storage.offsets_store import TOPIC, OffsetsStore
from tests.support.broker_shell import decode
from tests.support.lease_groups import LEASE, LEASE_GROUP_TYPE, LEASE_RECORD, LEASE_S, WITH_LEASE_GROUPS
from tests.support.wire import encode_request
from tests.support.clock import run




def open_coordinator(logs: LogManager, clock: BrokerClock, types: GroupTypes = WITH_LEASE_GROUPS) -> GroupCoordinator:
    store = OffsetsStore.open(logs, clock.now_ms(), group_records=types.records())
    return GroupCoordinator(GroupConfig(), store, clock=clock, topics=logs, types=types)


def acquire(c: GroupCoordinator, group_id: str, member_id: str) -> ErrorCode:
    lease = c.manager(LEASE)
    return c.apply(lambda now, now_ms: lease.acquire(now, now_ms, group_id, member_id))  # type: ignore[attr-defined]


def test_the_registry_holds_the_third_type_beside_the_built_in_ones():
    assert [t.name for t in WITH_LEASE_GROUPS.types] == ["classic", "consumer", "streams", "share", LEASE]
    assert WITH_LEASE_GROUPS.simple == "classic"  # an OffsetCommit's group is still classic
    store = OffsetsStore(group_records=WITH_LEASE_GROUPS.records())
    assert sorted(store.records) == sorted(["classic", "consumer", "streams", "share", LEASE])
    # A type twice, a record key type taken twice, a store without a type's records: refused.
    with pytest.raises(AssertionError):
        WITH_LEASE_GROUPS.with_type(LEASE_GROUP_TYPE)
    with pytest.raises(AssertionError):
        OffsetsStore(group_records=[*WITH_LEASE_GROUPS.records(), _Impostor()])
    with pytest.raises(ValueError, match="no records of group type"):
        GroupCoordinator(GroupConfig(), OffsetsStore(), types=WITH_LEASE_GROUPS)


class _Impostor:
    group_type = "impostor"
    record_types = frozenset({LEASE_RECORD})


def test_a_lease_group_lives_loads_expires_and_is_deleted_like_any_group(tmp_path):
    logs = LogManager.open(tmp_path, LogConfig(), 0)
    clock = BrokerClock(wall_ms=lambda: 1_700_000_000_000)
    seen = {}

    async def main() -> None:
        c = open_coordinator(logs, clock)
        assert acquire(c, "leases", "m1") == ErrorCode.none
        assert acquire(c, "leases", "m2") == ErrorCode.none
        assert c.group_type("leases") == LEASE
        assert c.list_groups() == [GroupOverview("leases", "", "Stable", LEASE)]
        assert c.list_groups(types_filter=["lease"]) == [GroupOverview("leases", "", "Stable", LEASE)]
        assert c.list_groups(types_filter=["classic"]) == []
        assert c.manager(LEASE).describe("leases") == ("Stable", ("m1", "m2"))  # type: ignore[attr-defined]
        # Its records are its own, in the offsets topic; a restart finds the group and its holders.
        assert c.store.group_records(LEASE).groups == {"leases": ("m1", "m2")}
        restarted = open_coordinator(logs, clock)
        assert restarted.manager(LEASE).describe("leases") == ("Stable", ("m1", "m2"))  # type: ignore[attr-defined]
        # One group id, one type: the other protocols find no group of theirs there.
        join = c.join_group(clock.monotonic(), group_id="leases", member_id="", group_instance_id=None,
                            client_id="c", client_host="/h", session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                            protocol_type="consumer", protocols=[("range", b"")], require_known_member_id=True)
        assert join.result.error == ErrorCode.inconsistent_group_protocol
        heartbeat = c.consumer_group_heartbeat(clock.monotonic(), ConsumerGroupHeartbeatRequest(
            group_id="leases", member_id="x", member_epoch=0, client_id="c", client_host="/h", instance_id=None,
            rack_id=None, rebalance_timeout_ms=10_000, subscribed_topic_names=("t",), subscribed_topic_regex=None,
            server_assignor=None, owned={}, api_version=1))
        assert (heartbeat.error, heartbeat.message) == (ErrorCode.group_id_not_found,
                                                        "Group leases is not a consumer group.")
        assert c.describe_group("leases") is None
        # Nor may the lease type take a classic group's id.
        c.commit_offsets(clock.monotonic(), group_id="simple", generation_id=-1, member_id="", group_instance_id=None,
                         offsets={("t", 0): (1, -1, "")})
        assert acquire(c, "simple", "m1") == ErrorCode.inconsistent_group_protocol
        # Committed offsets are the group's to answer: a lease group has none.
        assert c.commit_offsets(clock.monotonic(), group_id="leases", generation_id=-1, member_id="",
                                group_instance_id=None, offsets={("t", 0): (5, -1, "")}) == {
            ("t", 0): ErrorCode.group_id_not_found}
        assert c.validate_offset_fetch("leases", "m1", 0) == ErrorCode.group_id_not_found
        assert c.delete_offsets("leases", {"t": [0]}) == (ErrorCode.group_id_not_found, {})
        # DeleteGroups asks the group: held leases keep it.
        assert c.delete_groups(clock.monotonic(), ["leases"]) == {"leases": ErrorCode.non_empty_group}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(c.run)
            await trio.sleep(LEASE_S / 2)
            assert acquire(c, "leases", "m2") == ErrorCode.none  # renewed: m2's lease runs LEASE_S from here
            await trio.sleep(LEASE_S / 2 + 0.001)  # m1's lease ran out: the timer task ended it
            seen["after m1"] = c.manager(LEASE).describe("leases")  # type: ignore[attr-defined]
            clock.advance(LEASE_S)  # this broker's clock moves: m2's lease is over too, at once
            await trio.sleep(0.001)
            seen["after m2"] = c.manager(LEASE).describe("leases")  # type: ignore[attr-defined]
            nursery.cancel_scope.cancel()
        assert c.store.group_records(LEASE).groups == {"leases": ()}
        assert c.delete_groups(clock.monotonic(), ["leases"]) == {"leases": ErrorCode.none}
        assert c.group_type("leases") is None and c.list_groups(types_filter=["lease"]) == []

    run(main)
    assert seen == {"after m1": ("Stable", ("m2",)), "after m2": ("Empty", ())}
    # The deletion tombstoned its record: a restart finds no lease group.
    reopened = OffsetsStore.open(logs, 0, group_records=WITH_LEASE_GROUPS.records())
    assert reopened.group_records(LEASE).groups == {} and reopened.skipped_records == 0
    logs.close()


def test_a_broker_built_with_the_third_type_lists_and_deletes_it_over_the_wire(tmp_path):
    """Broker(group_types=...): ListGroups v5 answers the type's name (and filters by it),
    DescribeGroups v6 says the group is no classic group, DeleteGroups deletes it."""
    broker = Broker(BrokerConfig({"log.dirs": str(tmp_path / "data"), "listeners": "127.0.0.1:0"}),
                    group_types=WITH_LEASE_GROUPS)
    conn = Connection("peer")

    async def call(api_key: int, version: int, body: dict):
        frame = encode_request(build(load_request_schema(api_key, version), body))[4:]
        return decode((await broker.handle_frame(frame, conn)).data, api_key, version)

    async def main() -> None:
        lease = broker.groups.manager(LEASE)
        assert broker.groups.apply(lambda now, now_ms: lease.acquire(now, now_ms, "g", "m1")) == 0  # type: ignore[attr-defined]
        listed = await call(16, 5, {"states_filter": (), "types_filter": ("lease",)})
        assert [(g.group_id, g.group_state, g.group_type, g.protocol_type) for g in listed.groups] == [
            ("g", "Stable", "lease", "")]
        described = await call(15, 6, {"groups": ("g",), "include_authorized_operations": False})
        assert (described.groups[0].error_code, described.groups[0].error_message) == (
            ErrorCode.group_id_not_found, "Group g is not a classic group.")
        broker.groups.apply(lambda now, now_ms: lease.fire_timers(broker.groups.groups["g"], now + 60, now_ms))  # type: ignore[attr-defined]
        deleted = await call(42, 2, {"groups_names": ("g",)})
        assert [(r.group_id, r.error_code) for r in deleted.results] == [("g", ErrorCode.none)]
        assert (await call(16, 5, {"states_filter": (), "types_filter": ()})).groups == ()

    run(main)
    # Its record and the tombstone are in __consumer_offsets, under the type's own key type.
    keys = [key for _, _, key, _ in _records(broker, TOPIC)]
    assert keys and all(int.from_bytes(key[:2], "big") == LEASE_RECORD for key in keys)
    broker.close()


def _records(broker: Broker, topic: str):
    from minibroker.protocol.records import decode_records, iter_headers

    log = broker.logs.log(topic, 0)
    data = log.read(log.log_start_offset, 1 << 20)
    for header in iter_headers(data):
        yield from decode_records(memoryview(data)[header.position:header.position + header.size])
