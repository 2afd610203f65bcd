"""Quota managers (quotas/client_quota.py): throttle times against hand-computed values.

Default quota window: 11 samples of 1 s, so a first burst is divided by at least 10 s.
Throttle = round((observed - quota) / quota * window_ms), window_ms being the rate's own window.
"""

import math

import pytest

from minibroker.quotas.callback import DEFAULT, ClientQuotaEntity, QuotaType
from minibroker.quotas.client_quota import (
    INACTIVE_SENSOR_EXPIRATION_MS,
    ClientQuotaManager,
    ClientRequestQuotaManager,
    ControllerMutationQuotaManager,
    combine_throttle_time_ms,
)

DEFAULT_USER_CLIENT = ClientQuotaEntity.of(user=DEFAULT, client_id=DEFAULT)
NS_PER_S = 1_000_000_000


def produce_manager(limit=None, entity=DEFAULT_USER_CLIENT):
    manager = ClientQuotaManager(QuotaType.PRODUCE)
    if limit is not None:
        manager.update_quota(entity, limit)
    return manager


def test_nothing_is_recorded_until_a_quota_is_configured():
    manager = produce_manager()
    assert not manager.quotas_enabled
    assert manager.record_and_get_throttle_time_ms("alice", "c", 10**12, 0) == 0
    assert manager.sensor_count() == 0
    assert manager.metrics_snapshot(0) == []
    assert manager.max_value_in_quota_window("alice", "c") == math.inf


def test_kafka_quota_violation_and_recovery():
    # ClientQuotaManagerTest.testQuotaViolation, quota 500 B/s on <default user, default client>.
    manager = produce_manager(500)
    t = 0
    for _ in range(10):
        assert manager.record_and_get_throttle_time_ms("ANONYMOUS", "unknown", 400, t) == 0
        t += 1000
    t += 500
    # (400 * 10 + 2300) / 10.5 s = 600 B/s; (600 - 500) / 500 * 10 500 ms = 2100 ms
    assert manager.record_and_get_throttle_time_ms("ANONYMOUS", "unknown", 2300, t) == 2100
    t += 2100
    # Still over while the burst sits in the samples ...
    throttles = []
    for _ in range(10):
        throttles.append(manager.record_and_get_throttle_time_ms("ANONYMOUS", "unknown", 400, t))
        t += 1000
    assert throttles[0] > 0
    # ... and within once it has rolled out.
    assert manager.record_and_get_throttle_time_ms("ANONYMOUS", "unknown", 0, t) == 0


def test_first_burst_throttle():
    manager = produce_manager(100)
    # 2000 B at once: 2000 / 10 s = 200 B/s; (200 - 100) / 100 * 10 000 ms = 10 000 ms
    assert manager.record_and_get_throttle_time_ms("alice", "c", 2000, 0) == 10_000


def test_request_quota_throttle_is_capped_at_one_window():
    request = ClientRequestQuotaManager()
    request.update_quota(DEFAULT_USER_CLIENT, 10.0)  # 10 % of one thread
    assert request.nanos_to_percentage(NS_PER_S) == 100.0
    # 1.05 s of thread time = 105 percent-seconds; / 10 s = 10.5 %; (0.5 / 10) * 10 000 = 500 ms
    assert request.record_request_time_and_get_throttle_time_ms("alice", "c", 1_050_000_000, 0) == 500
    # another 1 s: 205 / 10 s = 20.5 %; (10.5 / 10) * 10 000 = 10 500 ms, capped at 1000 ms
    assert request.record_request_time_and_get_throttle_time_ms("alice", "c", NS_PER_S, 0) == 1000
    assert request.max_throttle_time_ms == 1000
    # network-thread time is recorded unchecked
    request.record_network_thread_time("alice", "c", NS_PER_S, 0)
    (rate,) = [v for g, name, tags, v in request.metrics_snapshot(0) if name == "request-time"]
    assert rate == pytest.approx(30.5)  # 305 percent-seconds / 10 s


def test_fetch_unrecord_takes_the_recording_back():
    fetch = ClientQuotaManager(QuotaType.FETCH)
    fetch.update_quota(DEFAULT_USER_CLIENT, 1000)
    assert fetch.record_and_get_throttle_time_ms("alice", "c", 5000, 0) == 0  # 500 B/s
    # 13 000 / 10 s = 1300 B/s; (300 / 1000) * 10 000 = 3000 ms
    assert fetch.record_and_get_throttle_time_ms("alice", "c", 8000, 0) == 3000
    fetch.unrecord_quota_sensor("alice", "c", 8000, 0)
    (rate,) = [v for g, name, tags, v in fetch.metrics_snapshot(0) if name == "byte-rate"]
    assert rate == 500.0
    # so 5000 more only reaches the quota: 10 000 / 10 s = 1000, not over it
    assert fetch.record_and_get_throttle_time_ms("alice", "c", 5000, 0) == 0


def test_fetch_size_cap():
    fetch = ClientQuotaManager(QuotaType.FETCH)
    fetch.update_quota(ClientQuotaEntity.of(user="alice"), 1000)
    # quota * (samples - 1) * window_s = 1000 * 10 * 1
    assert fetch.max_value_in_quota_window("alice", "c") == 10_000.0
    assert fetch.max_value_in_quota_window("bob", "c") == math.inf  # no quota for bob


def test_clients_with_the_same_tags_share_one_quota():
    manager = produce_manager(100, ClientQuotaEntity.of(user="alice"))  # level 3: tags (alice, "")
    # 600 / 10 s = 60 B/s each alone, but both count against alice's sensor:
    assert manager.record_and_get_throttle_time_ms("alice", "c1", 600, 0) == 0
    # 1200 / 10 s = 120; (20 / 100) * 10 000 = 2000 ms
    assert manager.record_and_get_throttle_time_ms("alice", "c2", 600, 0) == 2000
    assert manager.sensor_count() == 1
    # bob has no quota: tags ("", c1), unlimited
    assert manager.record_and_get_throttle_time_ms("bob", "c1", 10**9, 0) == 0
    assert manager.sensor_count() == 2


def test_client_id_default_quota_is_per_client():
    manager = produce_manager(100, ClientQuotaEntity.of(client_id=DEFAULT))  # level 8: ("", client)
    assert manager.record_and_get_throttle_time_ms("alice", "c1", 1000, 0) == 0  # 100 B/s
    assert manager.record_and_get_throttle_time_ms("bob", "c2", 1000, 0) == 0
    # same client id, another user: same tags ("", c1), so it adds up: 1500 / 10 s = 150;
    # (50 / 100) * 10 000 = 5000 ms
    assert manager.record_and_get_throttle_time_ms("bob", "c1", 500, 0) == 5000


def test_quota_updates_reach_live_sensors():
    manager = produce_manager(100)  # <default, default>: tags (alice, c)
    assert manager.record_and_get_throttle_time_ms("alice", "c", 1000, 0) == 0  # exactly 100 B/s
    # A default change re-reads every sensor: 50 B/s -> (100 - 50) / 50 * 10 000 = 10 000 ms
    manager.update_quota(DEFAULT_USER_CLIENT, 50)
    assert manager.record_and_get_throttle_time_ms("alice", "c", 0, 0) == 10_000
    # A named <alice, c> quota updates only that sensor (same tags): 200 B/s, within
    manager.update_quota(ClientQuotaEntity.of(user="alice", client_id="c"), 200)
    assert manager.quota_limit("alice", "c") == 200
    assert manager.record_and_get_throttle_time_ms("alice", "c", 0, 0) == 0
    # Removing it falls back to the default of 50
    manager.remove_quota(ClientQuotaEntity.of(user="alice", client_id="c"))
    assert manager.record_and_get_throttle_time_ms("alice", "c", 0, 0) == 10_000
    # Removing the last quota leaves the client unlimited
    manager.remove_quota(DEFAULT_USER_CLIENT)
    assert manager.quota_limit("alice", "c") is None
    assert manager.record_and_get_throttle_time_ms("alice", "c", 10**9, 0) == 0


def test_a_more_specific_quota_moves_the_client_to_new_tags():
    manager = produce_manager(100, ClientQuotaEntity.of(client_id=DEFAULT))  # tags ("", c)
    assert manager.record_and_get_throttle_time_ms("alice", "c", 1000, 0) == 0  # 100 B/s: at the quota
    manager.update_quota(ClientQuotaEntity.of(user="alice"), 300)  # level 3 now matches: (alice, "")
    # A fresh sensor with alice's own limit: 1000 / 10 s = 100 <= 300
    assert manager.record_and_get_throttle_time_ms("alice", "c", 1000, 0) == 0
    assert sorted(tags["user"] for _, name, tags, _ in manager.metrics_snapshot(0) if name == "byte-rate") == [
        "",
        "alice",
    ]
    # bob still shares the ("", c) sensor, which already holds 1000: 1500 / 10 s = 150;
    # (50 / 100) * 10 000 = 5000 ms
    assert manager.record_and_get_throttle_time_ms("bob", "c", 500, 0) == 5000


def test_apply_config_change_routes_by_key():
    produce, fetch = ClientQuotaManager(QuotaType.PRODUCE), ClientQuotaManager(QuotaType.FETCH)
    alice = ClientQuotaEntity.of(user="alice")
    for manager in (produce, fetch):
        assert manager.apply_config_change(alice, "producer_byte_rate", 1024.0) == (manager is produce)
    assert produce.quota_limit("alice", "x") == 1024.0
    assert fetch.quota_limit("alice", "x") is None
    assert not fetch.quotas_enabled
    assert produce.apply_config_change(alice, "producer_byte_rate", None)
    assert produce.quota_limit("alice", "x") is None
    assert not produce.apply_config_change(ClientQuotaEntity.of(ip="1.2.3.4"), "connection_creation_rate", 5)


def test_metrics_snapshot_and_throttle_time_average():
    manager = produce_manager(100, ClientQuotaEntity.of(user="alice"))
    manager.record_and_get_throttle_time_ms("alice", "c", 500, 0)
    manager.record_throttle_time("alice", "c", 2100, 0)
    manager.record_throttle_time("alice", "c", 900, 10)
    manager.record_throttle_time("alice", "c", 0, 20)  # not a throttle: not recorded
    snapshot = manager.metrics_snapshot(20)
    assert snapshot == [
        # 500 B over the padded window of 10 s + the 20 ms elapsed in the current sample
        ("Produce", "byte-rate", {"user": "alice", "client-id": ""}, pytest.approx(500 / 10.02)),
        ("Produce", "throttle-time", {"user": "alice", "client-id": ""}, 1500.0),  # (2100 + 900) / 2
    ]


def test_idle_sensors_expire_after_an_hour():
    manager = produce_manager(100)
    manager.record_and_get_throttle_time_ms("alice", "c", 10, 1000)
    manager.record_and_get_throttle_time_ms("bob", "c", 10, 2000)
    assert manager.expire_sensors(1000 + INACTIVE_SENSOR_EXPIRATION_MS) == 0  # not yet: strictly more
    assert manager.expire_sensors(1001 + INACTIVE_SENSOR_EXPIRATION_MS) == 1  # alice's
    assert [tags["user"] for _, _, tags, _ in manager.metrics_snapshot(2000)] == ["bob", "bob"]
    # A returning client starts afresh, with a new sensor.
    assert manager.record_and_get_throttle_time_ms("alice", "c", 1000, 5_000_000) == 0
    assert manager.sensor_count() == 2
    assert {tags["user"] for _, _, tags, _ in manager.metrics_snapshot(5_000_000)} == {"alice", "bob"}


def test_controller_mutation_strict_and_permissive():
    quota = ControllerMutationQuotaManager()
    quota.update_quota(DEFAULT_USER_CLIENT, 10.0)  # 10 partitions/s, burst 11 * 1 s * 10 = 110
    t = 100_000  # Kafka's bucket starts empty at t=0; by 100 s it is full
    assert quota.record_and_get_throttle_time_ms("alice", "c", 150, t) == 0  # 110 -> -40, accepted
    # In debt: 40 / 10 per s = 4000 ms, and the mutation is not recorded.
    assert quota.record_and_get_throttle_time_ms("alice", "c", 1, t) == 4000
    assert quota.record_and_get_throttle_time_ms("alice", "c", 1, t + 4000) == 0  # refilled to 0
    permissive = ControllerMutationQuotaManager()
    permissive.update_quota(DEFAULT_USER_CLIENT, 10.0)
    # records 150 first (110 -> -40), then throttles 4000 ms
    assert permissive.record_permissive_and_get_throttle_time_ms("alice", "c", 150, t) == 4000
    (tokens,) = [v for _, name, _, v in permissive.metrics_snapshot(t) if name == "tokens"]
    assert tokens == -40.0


def test_combine_throttle_time():
    assert combine_throttle_time_ms(0, 0) == (0, False)
    assert combine_throttle_time_ms(2100, 500) == (2100, True)
    assert combine_throttle_time_ms(500, 1000) == (1000, False)
    assert combine_throttle_time_ms(700, 700) == (700, False)  # a tie is charged to the request quota
