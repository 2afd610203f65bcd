"""The share APIs over the wire, in process on trio's MockClock (tests/support/share_shell.py):
ApiVersions and the share.version feature; a share consumer's whole cycle (heartbeat, ShareFetch,
acknowledgements in ShareFetch and ShareAcknowledge); a RELEASE seen by another member at delivery
count 2; acquisition locks expiring on the broker's clock; long polls woken by a produce and by an
acknowledgement; share sessions and their errors, and the final fetch or a lost connection releasing
records; acknowledgement validation; read_committed skipping aborted records; share.auto.offset.reset;
a restart keeping every acknowledgement and delivery count; the admin APIs and DeleteGroups; and the
share group configs through IncrementalAlterConfigs and DescribeConfigs.
"""

from __future__ import annotations

import trio

from minibroker.protocol.errors import ErrorCode
from tests.support.clock import run
from tests.support.share_shell import ShareShell, acquired, partition_of, with_background
import trio.lowlevel

G = "share-group"
A, B = "member-a", "member-b"
ACCEPT, RELEASE, REJECT, GAP, RENEW = 1, 2, 3, 0, 4


def test_api_versions_advertise_the_share_apis_and_the_share_version_feature(tmp_path):
    shell = ShareShell(tmp_path)

    async def main():
        versions = await shell.call(18, {"client_software_name": "t", "client_software_version": "1"})
        ranges = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert {k: ranges[k] for k in (76, 77, 78, 79, 90, 91, 92)} == {
            76: (1, 1), 77: (1, 1), 78: (1, 2), 79: (1, 2), 90: (0, 1), 91: (0, 0), 92: (0, 0)}
        supported = {f.name: (f.min_version, f.max_version) for f in versions.supported_features}
        assert supported["share.version"] == (0, 1)
        assert {f.name: f.max_version_level for f in versions.finalized_features}["share.version"] == 1

    run(main)
    shell.broker.close()
    off = ShareShell(tmp_path / "off", share_version=0)

    async def disabled():
        assert (await off.heartbeat(G, A)).error_code == ErrorCode.unsupported_version
        assert (await off.fetch(G, A, 0)).error_code == ErrorCode.unsupported_version
        versions = await off.call(18, {"client_software_name": "t", "client_software_version": "1"})
        assert 78 in {k.api_key for k in versions.api_keys}  # still advertised, as Kafka does
        assert "share.version" not in {f.name for f in versions.finalized_features}

    run(disabled)
    off.broker.close()


def test_a_share_consumers_cycle_and_a_release_seen_by_another_member(tmp_path):
    shell = ShareShell(tmp_path)

    async def main():
        await shell.set_group_config(G, share_auto_offset_reset="earliest")
        shell.produce([b"a", b"b", b"c"])
        joined = await shell.heartbeat(G, A)
        assert joined.error_code == 0 and joined.assignment.topic_partitions == ()
        assigned = await shell.heartbeat(G, A, joined.member_epoch)
        assert assigned.assignment.topic_partitions[0].partitions == (0,)
        first = await shell.fetch(G, A, 0)
        assert first.error_code == 0 and first.acquisition_lock_timeout.total_seconds() == 10.0
        assert acquired(first) == [(0, 2, 1)] and partition_of(first).records
        # Accept 0, release 1 and 2, which another member then receives again.
        second = await shell.acknowledge(G, A, 1, {0: [(0, 2, [ACCEPT, RELEASE, RELEASE])]})
        assert second.responses[0].partitions[0].error_code == 0
        await shell.heartbeat(G, B)
        other = await shell.fetch(G, B, 0)
        assert acquired(other) == [(1, 2, 2)]
        done = await shell.acknowledge(G, B, 1, {0: [(1, 2, [ACCEPT])]})
        assert done.error_code == 0 and done.responses[0].partitions[0].error_code == 0
        assert done.acquisition_lock_timeout.total_seconds() == 10.0
        summary = await shell.call(90, {"groups": [{"group_id": G, "topics": None}]})
        (part,) = summary.groups[0].topics[0].partitions
        assert part.lag == 0 and part.error_code == 0

    run(main)
    shell.broker.close()


def test_locks_expire_on_the_brokers_clock(tmp_path):
    shell = ShareShell(tmp_path)

    async def test():
        await shell.set_group_config(G, share_auto_offset_reset="earliest", share_record_lock_duration_ms="2000")
        shell.produce([b"x"])
        await shell.heartbeat(G, A)
        assert acquired(await shell.fetch(G, A, 0)) == [(0, 0, 1)]
        await shell.heartbeat(G, B)
        assert acquired(await shell.fetch(G, B, 0)) == []
        await trio.sleep(1.9)
        assert acquired(await shell.fetch(G, B, 1)) == []
        shell.broker.clock.advance(0.2)  # this broker's time, moved on its own
        await trio.lowlevel.checkpoint()
        assert acquired(await shell.fetch(G, B, 2)) == [(0, 0, 2)]
        late = await shell.fetch(G, A, 1, acks={0: [(0, 0, [ACCEPT])]})
        assert partition_of(late).acknowledge_error_code == ErrorCode.invalid_record_state

    run(lambda: with_background(shell, test))
    shell.broker.close()


def test_long_polls_are_woken_by_a_produce_and_by_a_release(tmp_path):
    shell = ShareShell(tmp_path)

    async def test():
        await shell.set_group_config(G, share_auto_offset_reset="earliest")
        await shell.heartbeat(G, A)
        await shell.heartbeat(G, B)
        got = {}

        async def poll(member, epoch, key):
            start = trio.current_time()
            got[key] = (await shell.fetch(G, member, epoch, max_wait=5000), trio.current_time() - start)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll, A, 0, "a")
            await trio.sleep(1)
            shell.produce([b"one"])
        assert acquired(got["a"][0]) == [(0, 0, 1)] and got["a"][1] < 1.5
        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll, B, 0, "b")
            await trio.sleep(1)
            assert "b" not in got  # nothing to acquire: it waits
            await shell.acknowledge(G, A, 1, {0: [(0, 0, [RELEASE])]})
        assert acquired(got["b"][0]) == [(0, 0, 2)] and got["b"][1] < 1.5
        start = trio.current_time()
        empty = await shell.fetch(G, B, 1, max_wait=500)
        assert acquired(empty) == [] and trio.current_time() - start >= 0.5

    run(lambda: with_background(shell, test))
    shell.broker.close()


def test_share_sessions_and_their_errors(tmp_path):
    shell = ShareShell(tmp_path)

    async def main():
        await shell.set_group_config(G, share_auto_offset_reset="earliest")
        shell.produce([b"x", b"y"])
        await shell.heartbeat(G, A)
        assert (await shell.fetch(G, A, 1)).error_code == ErrorCode.share_session_not_found
        initial_acks = await shell.fetch(G, A, 0, acks={0: [(0, 0, [ACCEPT])]})
        assert initial_acks.error_code == ErrorCode.invalid_request
        assert acquired(await shell.fetch(G, A, 0)) == [(0, 1, 1)]
        assert (await shell.fetch(G, A, 5)).error_code == ErrorCode.invalid_share_session_epoch
        ack0 = await shell.acknowledge(G, A, 0, {0: [(0, 0, [ACCEPT])]})
        assert ack0.error_code == ErrorCode.invalid_share_session_epoch
        # A later fetch with nothing new answers no partition at all.
        quiet = await shell.fetch(G, A, 1)
        assert quiet.error_code == 0 and quiet.responses == ()
        # The final fetch acknowledges, fetches nothing, closes the session and releases the rest.
        final = await shell.fetch(G, A, -1, partitions=(), acks={0: [(0, 0, [ACCEPT])]})
        assert partition_of(final).acknowledge_error_code == 0 and acquired(final) == []
        assert (await shell.fetch(G, A, 3)).error_code == ErrorCode.share_session_not_found
        await shell.heartbeat(G, B)
        assert acquired(await shell.fetch(G, B, 0)) == [(1, 1, 2)]
        # A connection that closes ends its sessions: B's records come back at once.
        shell.disconnect(B)
        assert acquired(await shell.fetch(G, A, 0)) == [(1, 1, 3)]

    run(main)
    shell.broker.close()


def test_acknowledgement_batches_are_validated(tmp_path):
    shell = ShareShell(tmp_path)

    async def main():
        await shell.set_group_config(G, share_auto_offset_reset="earliest")
        shell.produce([b"x"] * 6)
        await shell.heartbeat(G, A)
        await shell.fetch(G, A, 0)
        epoch = 1
        for bad in ([(3, 2, [ACCEPT])], [(0, 1, [ACCEPT]), (0, 0, [ACCEPT])], [(0, 2, [])],
                    [(0, 2, [ACCEPT, ACCEPT])], [(0, 0, [9])], [(0, 0, [RENEW])]):
            answer = await shell.acknowledge(G, A, epoch, {0: bad})
            epoch += 1
            assert answer.responses[0].partitions[0].error_code == ErrorCode.invalid_request, bad
        wrong_member = await shell.fetch(G, B, 0)
        assert wrong_member.error_code == 0
        stolen = await shell.acknowledge(G, B, 1, {0: [(0, 0, [ACCEPT])]})
        assert stolen.responses[0].partitions[0].error_code == ErrorCode.invalid_record_state
        renewed = await shell.acknowledge(G, A, epoch, {0: [(0, 5, [RENEW])]}, renew=True)
        assert renewed.responses[0].partitions[0].error_code == 0
        bad_id = await shell.fetch(G, "x" * 37, 0)
        assert (bad_id.error_code, bad_id.error_message) == (ErrorCode.invalid_request, "Invalid member id in the request.")

    run(main)
    shell.broker.close()


def test_read_committed_skips_aborted_records_and_waits_for_open_transactions(tmp_path):
    shell = ShareShell(tmp_path)

    async def main():
        await shell.set_group_config(G, share_auto_offset_reset="earliest", share_isolation_level="read_committed")
        shell.produce([b"plain"])                                                      # 0
        shell.produce([b"aborted-1", b"aborted-2"], producer_id=7, producer_epoch=0, base_sequence=0,
                      transactional=True)                                               # 1-2
        shell.marker(7, commit=False)                                                   # 3
        shell.produce([b"committed"], producer_id=8, producer_epoch=0, base_sequence=0, transactional=True)  # 4
        shell.produce([b"open"], producer_id=9, producer_epoch=0, base_sequence=0, transactional=True)       # 5
        shell.marker(8, commit=True)                                                    # 6
        await shell.heartbeat(G, A)
        first = await shell.fetch(G, A, 0)
        # Up to the last stable offset (5, producer 9's open transaction); 1-2 archived, not delivered.
        assert acquired(first) == [(0, 0, 1), (3, 4, 1)]
        shell.marker(9, commit=True)
        acked = await shell.acknowledge(G, A, 1, {0: [(0, 0, [ACCEPT]), (3, 3, [GAP]), (4, 4, [ACCEPT])]})
        assert acked.responses[0].partitions[0].error_code == 0
        second = await shell.fetch(G, A, 2)
        assert acquired(second) == [(5, 7, 1)]

    run(main)
    shell.broker.close()


def test_share_auto_offset_reset_latest_earliest_and_by_duration(tmp_path):
    shell = ShareShell(tmp_path)

    async def main():
        shell.produce([b"old-1", b"old-2"])
        await trio.sleep(3600)
        shell.produce([b"recent"])
        for group, setting, expected in (("g-latest", "latest", []), ("g-earliest", "earliest", [(0, 2, 1)]),
                                         ("g-duration", "by_duration:PT10M", [(2, 2, 1)])):
            await shell.set_group_config(group, share_auto_offset_reset=setting)
            await shell.heartbeat(group, A, client=group)
            assert acquired(await shell.fetch(group, A, 0, client=group)) == expected, setting
        shell.produce([b"new"])
        assert acquired(await shell.fetch("g-latest", A, 1, client="g-latest")) == [(3, 3, 1)]

    run(main)
    shell.broker.close()


def test_a_restart_keeps_acknowledgements_and_delivery_counts(tmp_path):
    shell = ShareShell(tmp_path)

    async def before():
        await shell.set_group_config(G, share_auto_offset_reset="earliest")
        shell.produce([b"r0", b"r1", b"r2", b"r3", b"r4"])
        await shell.heartbeat(G, A)
        await shell.fetch(G, A, 0)
        await shell.acknowledge(G, A, 1, {0: [(0, 4, [ACCEPT, RELEASE, REJECT, ACCEPT, RELEASE])]})
        assert acquired(await shell.fetch(G, A, 2)) == [(1, 1, 2), (4, 4, 2)]
        await shell.acknowledge(G, A, 3, {0: [(1, 1, [RELEASE])]})  # 4 stays acquired, never acknowledged

    run(before)
    shell.broker.logs.close(clean=False)  # as kill -9 leaves the files
    shell.broker.lock.release()
    again = ShareShell(tmp_path)

    async def after():
        await again.heartbeat(G, B)
        # 0, 2, 3 are done; 1 was released twice (count 2 kept); 4's second delivery was never
        # written (acquisitions are not), so it comes back with the count last written, 1.
        assert acquired(await again.fetch(G, B, 0)) == [(1, 1, 3), (4, 4, 2)]

    run(after)
    again.broker.close()


def test_admin_apis_and_delete_groups(tmp_path):
    shell = ShareShell(tmp_path)

    async def main():
        shell.produce([b"x"] * 10)
        await shell.heartbeat(G, A)
        busy = await shell.call(91, {"group_id": G, "topics": [{"topic_name": "t", "partitions": [
            {"partition_index": 0, "start_offset": 4}]}]})
        assert busy.error_code == ErrorCode.non_empty_group
        await shell.heartbeat(G, A, -1)
        altered = await shell.call(91, {"group_id": G, "topics": [
            {"topic_name": "t", "partitions": [{"partition_index": 0, "start_offset": 4}, {"partition_index": 3, "start_offset": 0}]},
            {"topic_name": "missing", "partitions": [{"partition_index": 0, "start_offset": 0}]}]})
        assert altered.error_code == 0
        assert [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in altered.responses] == [
            ("t", [(0, 0), (3, ErrorCode.unknown_topic_or_partition)]), ("missing", [(0, ErrorCode.unknown_topic_or_partition)])]
        described = await shell.call(90, {"groups": [{"group_id": G, "topics": [{"topic_name": "t", "partitions": [0]}]}]})
        (part,) = described.groups[0].topics[0].partitions
        assert (part.start_offset, part.lag) == (4, 6)
        await shell.heartbeat(G, A)
        assert acquired(await shell.fetch(G, A, 0)) == [(4, 9, 1)]
        listed = await shell.call(16, {"states_filter": [], "types_filter": ["share"]})
        assert [(g.group_id, g.group_type, g.protocol_type, g.group_state) for g in listed.groups] == [
            (G, "share", "share", "Stable")]
        assert (await shell.call(42, {"groups_names": [G]})).results[0].error_code == ErrorCode.non_empty_group
        await shell.heartbeat(G, A, -1)
        deleted = await shell.call(92, {"group_id": G, "topics": [{"topic_name": "t"}]})
        assert deleted.error_code == 0 and deleted.responses[0].error_code == 0
        gone = await shell.call(92, {"group_id": G, "topics": [{"topic_name": "t"}]})
        assert gone.responses[0].error_message == "There is no offset information to delete."
        assert (await shell.call(42, {"groups_names": [G]})).results[0].error_code == 0
        assert (await shell.call(16, {"states_filter": [], "types_filter": ["share"]})).groups == ()
        missing = await shell.call(92, {"group_id": G, "topics": []})
        assert missing.error_code == ErrorCode.group_id_not_found

    run(main)
    shell.broker.close()


def test_share_group_configs_are_described_and_checked(tmp_path):
    shell = ShareShell(tmp_path)

    async def main():
        await shell.set_group_config(G, share_record_lock_duration_ms="5000", share_isolation_level="read_committed")
        described = await shell.call(32, {"resources": [{"resource_type": 32, "resource_name": G,
                                                         "configuration_keys": None}],
                                          "include_synonyms": True, "include_documentation": False})
        configs = {c.name: (c.value, c.config_source) for c in described.results[0].configs}
        assert configs["share.record.lock.duration.ms"] == ("5000", 8)
        assert configs["share.isolation.level"] == ("read_committed", 8)
        assert configs["share.auto.offset.reset"] == ("latest", 5)
        assert configs["share.delivery.count.limit"] == ("5", 5)
        for name, value, message in (
                ("share.isolation.level", "sometimes", "String must be one of: read_committed, read_uncommitted"),
                ("share.delivery.count.limit", "11", "share.delivery.count.limit must be in the range 2 to 10 inclusive."),
                ("share.auto.offset.reset", "by_duration:-PT1H", "The value must be either 'earliest', 'latest'")):
            refused = await shell.call(44, {"resources": [{"resource_type": 32, "resource_name": G, "configs": [
                {"name": name, "config_operation": 0, "value": value}]}], "validate_only": False})
            assert refused.responses[0].error_code == ErrorCode.invalid_config
            assert message in refused.responses[0].error_message

    run(main)
    shell.broker.close()


def test_update_features_turns_share_groups_off_and_on(tmp_path):
    """share.version through UpdateFeatures (kafka-features downgrade/upgrade): at 0 the share APIs
    answer UNSUPPORTED_VERSION and every share session is gone (Kafka's onShareVersionToggle); the
    level is kept in the data directory."""
    shell = ShareShell(tmp_path)

    def update(level: int, upgrade_type: int):
        return shell.call(57, {"timeout": 5000, "validate_only": False, "feature_updates": [
            {"feature": "share.version", "max_version_level": level, "upgrade_type": upgrade_type}]}, version=1)

    async def main():
        await shell.set_group_config(G, share_auto_offset_reset="earliest")
        shell.produce([b"x"])
        await shell.heartbeat(G, A)
        assert acquired(await shell.fetch(G, A, 0)) == [(0, 0, 1)]
        assert (await update(0, 2)).error_code == 0  # a safe downgrade
        assert (await shell.fetch(G, A, 1)).error_code == ErrorCode.unsupported_version
        assert (await update(1, 1)).error_code == 0
        assert (await shell.fetch(G, A, 1)).error_code == ErrorCode.share_session_not_found
        assert acquired(await shell.fetch(G, A, 0)) == [(0, 0, 1)]  # reloaded: the acquisition was never written

    run(main)
    shell.broker.close()
    assert '"share.version": 1' in (tmp_path / "data" / "features.json").read_text()
