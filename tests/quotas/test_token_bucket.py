"""`quota.algorithm=token_bucket` (quotas/client_quota.py): byte-rate and request-time quotas enforced
by a KIP-599 bucket, arithmetic with explicit `now`, then the same in the broker shell on trio's
MockClock, then a real client.

Bucket arithmetic (Kafka's TokenBucket / ControllerMutationQuotaManager): burst B = samples *
window_s * Q (11 * 1 s * Q by default), full at first use, refilled at Q per second up to B;
recording takes tokens; throttle = round(-tokens / Q * 1000) while tokens < 0.
"""

from __future__ import annotations

import pytest

from minibroker.quotas.callback import DEFAULT, ClientQuotaEntity, QuotaType
from minibroker.quotas.client_quota import SAMPLED, TOKEN_BUCKET, ClientQuotaManager, ClientRequestQuotaManager
from minibroker.quotas.rate import MetricConfig

ANY = ClientQuotaEntity.of(user=DEFAULT, client_id=DEFAULT)
NS_PER_S = 1_000_000_000


def manager(limit: float, algorithm: str = TOKEN_BUCKET, quota_type=QuotaType.PRODUCE, **kwargs) -> ClientQuotaManager:
    m = ClientQuotaManager(quota_type, algorithm=algorithm, **kwargs)
    m.update_quota(ANY, limit)
    return m


def test_burst_then_debt_then_refill():
    """Q = 1000 B/s: the first 11,000 B pass (the burst), each byte beyond is 1 ms of throttle, and
    time pays the debt back at 1000 B/s."""
    m = manager(1000)
    assert m.record_and_get_throttle_time_ms("u", "c", 11_000, 0) == 0  # exactly the burst
    assert m.record_and_get_throttle_time_ms("u", "c", 1, 0) == 1
    assert m.record_and_get_throttle_time_ms("u", "c", 2499, 0) == 2500  # 2500 B in debt: 2.5 s
    assert m.record_and_get_throttle_time_ms("u", "c", 0, 1000) == 1500  # 1 s repaid 1000 B
    assert m.record_and_get_throttle_time_ms("u", "c", 0, 2500) == 0  # repaid
    # Refilling stops at the burst: after a long idle the client again gets exactly 11,000 B.
    assert m.record_and_get_throttle_time_ms("u", "c", 11_000, 100_000) == 0
    assert m.record_and_get_throttle_time_ms("u", "c", 100, 100_000) == 100


def test_the_bucket_follows_the_windows_settings():
    """Burst = quota.window.num * quota.window.size.seconds * Q: 2 samples of 3 s at 500 B/s = 3000 B."""
    m = manager(500, metric_config=MetricConfig(samples=2, window_ms=3000))
    assert m.record_and_get_throttle_time_ms("u", "c", 3000, 0) == 0
    assert m.record_and_get_throttle_time_ms("u", "c", 500, 0) == 1000


def greedy_bytes_per_second(algorithm: str, limit: float, seconds: int, chunk: int = 500) -> list[int]:
    """A client that sends `chunk` bytes whenever it may (after each throttle), for `seconds`,
    in whole-millisecond steps; the bytes admitted in each second."""
    m = manager(limit, algorithm)
    per_second = [0] * seconds
    now = 0
    while now < seconds * 1000:
        per_second[now // 1000] += chunk
        now += max(1, m.record_and_get_throttle_time_ms("u", "c", chunk, now))
    return per_second


def test_a_greedy_client_gets_the_quota_every_second_after_the_burst():
    """The point of the bucket: after the first seconds' burst, each second admits the quota (to
    within one chunk), whereas Kafka's sampled rate lets bursts through as old samples expire."""
    limit, chunk = 5000, 500
    bucket = greedy_bytes_per_second(TOKEN_BUCKET, limit, 60, chunk)
    assert bucket[0] >= 11 * limit  # the burst, at once
    assert all(abs(b - limit) <= chunk for b in bucket[2:])
    sampled = greedy_bytes_per_second(SAMPLED, limit, 60, chunk)
    steady = sampled[12:]
    assert max(steady) >= 2 * limit and min(steady) <= limit // 2  # the bursts Kafka's sampled rate lets through
    # Over the minute both admit about the same: the quota plus one first burst.
    assert abs(sum(bucket) - sum(sampled)) <= 0.2 * sum(bucket)


def test_a_throttled_fetch_is_taken_back_from_the_bucket():
    m = manager(1000, quota_type=QuotaType.FETCH)
    assert m.record_and_get_throttle_time_ms("u", "c", 12_000, 0) == 1000
    m.unrecord_quota_sensor("u", "c", 12_000, 0)  # an empty response was sent instead
    assert m.record_and_get_throttle_time_ms("u", "c", 11_000, 0) == 0


def test_request_time_bucket_caps_its_throttle_at_one_window():
    """request_percentage = 10: the bucket holds 11 * 10 = 110 percent-seconds (1 s of thread time
    is 100). 3 s of thread time leave it 190 in debt: 19 s at 10 per second, capped at one window."""
    m = ClientRequestQuotaManager(algorithm=TOKEN_BUCKET)
    m.update_quota(ANY, 10)
    assert m.record_request_time_and_get_throttle_time_ms("u", "c", NS_PER_S, 0) == 0  # 100 of 110
    assert m.record_request_time_and_get_throttle_time_ms("u", "c", 2 * NS_PER_S, 0) == 1000


def test_a_changed_quota_applies_to_the_live_bucket():
    m = manager(1000)
    assert m.record_and_get_throttle_time_ms("u", "c", 11_000, 0) == 0
    m.update_quota(ANY, 2000)  # tokens stay at 0; now refilled at 2000 B/s, up to 22,000
    assert m.record_and_get_throttle_time_ms("u", "c", 2000, 1000) == 0
    assert m.record_and_get_throttle_time_ms("u", "c", 2000, 1000) == 1000


def test_metrics_are_the_rate_and_the_balance():
    m = manager(1000)
    m.record_and_get_throttle_time_ms("u", "c", 12_000, 0)
    m.record_throttle_time("u", "c", 1000, 0)
    names = {(name, round(value)) for _group, name, _tags, value in m.metrics_snapshot(0)}
    # byte-rate as under the sampled algorithm: 12,000 B over the padded 10 s
    assert names == {("byte-rate", 1200), ("tokens", -1000), ("throttle-time", 1000)}


def test_an_unknown_algorithm_is_refused():
    with pytest.raises(ValueError, match="sampled, token_bucket"):
        ClientQuotaManager(QuotaType.PRODUCE, algorithm="leaky")


# ---- in the broker ---------------------------------------------------------------------------------


def test_the_broker_enforces_produce_with_the_bucket(tmp_path):
    """quota.algorithm=token_bucket, 1000 B/s on a client id, on trio's MockClock (time stands still
    while the requests are handled): a first request within the 11,000 B burst is not throttled, a
    second one is, by exactly its bytes beyond the burst (1 ms per byte at 1000 B/s)."""
    import trio

    from minibroker.broker import Connection
    from tests.support.broker_shell import decode, new_broker, produce_frame, set_quota, throttle_of
    from tests.support.clock import run

    broker = new_broker(tmp_path, quota_algorithm="token_bucket")
    set_quota(broker, [("client-id", "tb")], "producer_byte_rate", 1000)

    async def main():
        first = produce_frame("tb", 6000)
        second = produce_frame("tb", 6000)
        assert (await broker.handle_frame(first, Connection("t"))).throttle_ms == 0
        response = await broker.handle_frame(second, Connection("t"))
        assert response.throttle_ms == len(first) + len(second) - 11_000 > 0
        assert throttle_of(decode(response.data, 0, 9)) == response.throttle_ms
        now_ms = int(trio.current_time() * 1000)
        metrics = {n: v for _g, n, _t, v in broker.quotas.produce.metrics_snapshot(now_ms)}
        assert metrics["tokens"] == 11_000 - len(first) - len(second)

    run(main)
    broker.close()


def test_a_bad_algorithm_stops_the_broker_with_the_key(tmp_path):
    from minibroker.config import BrokerConfig, ConfigError

    with pytest.raises(ConfigError, match="quota.algorithm"):
        BrokerConfig({"quota.algorithm": "token-bucket"})


@pytest.mark.interop
def test_a_real_producer_gets_the_burst_then_is_throttled(start_broker, unique):
    """kafka-python against token_bucket at 2000 B/s (burst 22,000 B): 15 kB pass unthrottled, 15 kB
    more leave the bucket ~8 kB in debt (the seconds in between refill at most a few kB): throttled,
    and the broker publishes the bucket's negative balance beside the byte rate."""
    import urllib.request

    from tests.support.quota_clients import alter_quota, produce

    topic, client_id = unique("tb"), unique("tb-client")
    with start_broker(quota_algorithm="token_bucket", metrics_listen="127.0.0.1:0") as running:
        alter_quota(running.bootstrap, [("client-id", client_id)], "producer_byte_rate", 2000)
        assert produce(running.bootstrap, topic, client_id, 15) == 0
        assert produce(running.bootstrap, topic, client_id, 15) > 0
        scraped = urllib.request.urlopen(running.metrics_url, timeout=10).read().decode()
    tokens = [line for line in scraped.splitlines()
              if line.startswith(f'kafka_server_produce_tokens{{user="",client_id="{client_id}"}}')]
    assert len(tokens) == 1 and float(tokens[0].rsplit(" ", 1)[1]) < 0
    assert f'kafka_server_produce_byte_rate{{user="",client_id="{client_id}"}}' in scraped
