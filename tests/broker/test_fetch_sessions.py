"""Incremental fetch sessions (KIP-227, minibroker.fetch_sessions) with exact Fetch requests: a full
fetch opening a session, incremental fetches answered only the partitions that changed (records, a
moved high watermark or log start offset), forgotten partitions, topic ids (v13+), the session
errors (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_TOPIC_ID_ERROR),
closing a session, the cache's slots; and the cache's eviction rules on their own (Kafka's
FetchSessionCache: stale sessions first, young sessions kept from ordinary clients, privileged
sessions evicting unprivileged ones, smaller sessions giving way to larger ones)."""

from __future__ import annotations

from minibroker.admin_client import AdminClient
from minibroker.fetch_sessions import CachedPartition, FetchSessionCache
from tests.support.txn_wire import create

NOT_FOUND, BAD_EPOCH, TOPIC_ID_ERROR = 70, 71, 106


def fetch(c, session_id, epoch, parts, version=12, forget=(), topic_ids=None, max_wait=0, min_bytes=0):
    """parts: {(topic, partition): fetch offset}; forget: [(topic, partition)]; -> (error, session id,
    {(topic, partition): (high watermark, number of record batches)})."""
    by_topic: dict = {}
    for (topic, partition), offset in parts.items():
        by_topic.setdefault(topic, []).append({"partition": partition, "current_leader_epoch": -1,
                                               "fetch_offset": offset, "last_fetched_epoch": -1,
                                               "log_start_offset": -1, "partition_max_bytes": 1 << 20})
    forgotten: dict = {}
    for topic, partition in forget:
        forgotten.setdefault(topic, []).append(partition)

    def topic_field(topic):
        return {"topic_id": topic_ids[topic]} if version >= 13 else {"topic": topic}

    body = {"replica_id": -1, "max_wait": max_wait, "min_bytes": min_bytes, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": session_id, "session_epoch": epoch, "rack_id": "",
            "topics": [{**topic_field(t), "partitions": ps} for t, ps in by_topic.items()],
            "forgotten_topics_data": [{**topic_field(t), "partitions": ps} for t, ps in forgotten.items()]}
    r = c.call(1, body, version=version)
    names = {v: k for k, v in (topic_ids or {}).items()}
    got = {}
    for t in r.responses:
        name = t.topic if version < 13 else names[t.topic_id]
        for p in t.partitions:
            got[(name, p.partition_index)] = (p.high_watermark, len(p.records or b"") > 0)
    return int(r.error_code), r.session_id, got


def produce(c, topic, partition, value=b"v"):
    from minibroker.protocol.records import encode_batch

    c.call(0, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": encode_batch([(b"k", value)], 0)}]}]},
        version=9)


def test_a_session_answers_only_what_changed(broker, unique):
    topic = unique("fs")
    with AdminClient(broker.bootstrap) as c:
        create(c, topic, 3)
        produce(c, topic, 0)
        parts = {(topic, p): 0 for p in range(3)}
        # A full fetch asking for a session: every partition, and a session id.
        error, sid, got = fetch(c, 0, 0, parts)
        assert error == 0 and sid != 0
        assert got == {(topic, 0): (1, True), (topic, 1): (0, False), (topic, 2): (0, False)}
        # Incremental, naming only the partition whose position moved: nothing new anywhere.
        error, sid1, got = fetch(c, sid, 1, {(topic, 0): 1})
        assert (error, sid1, got) == (0, sid, {})
        # New records in partition 2: only it is answered, though the request names nothing.
        produce(c, topic, 2)
        produce(c, topic, 2)
        assert fetch(c, sid, 2, {}) == (0, sid, {(topic, 2): (2, True)})
        # Its high watermark was sent: the client's new position alone makes nothing to answer.
        assert fetch(c, sid, 3, {(topic, 2): 2}) == (0, sid, {})
        # A forgotten partition is not read any more; the others are.
        produce(c, topic, 1)
        produce(c, topic, 0)
        assert fetch(c, sid, 4, {}, forget=[(topic, 1)]) == (0, sid, {(topic, 0): (2, True)})
        produce(c, topic, 1)
        assert fetch(c, sid, 5, {(topic, 0): 2}) == (0, sid, {})
        # A partition added back by an incremental fetch is answered from its position.
        assert fetch(c, sid, 6, {(topic, 1): 0}) == (0, sid, {(topic, 1): (2, True)})
        # The session's errors: no partitions, session id 0; the session itself is unharmed.
        assert fetch(c, sid, 6, {}) == (BAD_EPOCH, 0, {})
        assert fetch(c, sid + 1, 1, {}) == (NOT_FOUND, 0, {})
        assert fetch(c, sid, 7, {(topic, 1): 2}) == (0, sid, {})
        # Epoch -1 with the id closes it (and answers a sessionless full fetch).
        assert fetch(c, sid, -1, {(topic, 0): 2}) == (0, 0, {(topic, 0): (2, False)})
        assert fetch(c, sid, 8, {}) == (NOT_FOUND, 0, {})
        # Forgetting everything closes a session too: the answer is sessionless.
        _, sid, _ = fetch(c, 0, 0, {(topic, 0): 2})
        assert fetch(c, sid, 1, {}, forget=[(topic, 0)]) == (0, 0, {})
        assert broker.broker.fetch_sessions.cache.get(sid) is None


def test_an_incremental_fetch_with_nothing_new_long_polls_until_a_record_comes(broker, unique):
    # Its partitions are not read while nothing moved, but it still waits on all of them.
    import threading

    topic = unique("fsw")
    with AdminClient(broker.bootstrap) as c, AdminClient(broker.bootstrap) as producer:
        create(c, topic, 4)
        _, sid, _ = fetch(c, 0, 0, {(topic, p): 0 for p in range(4)})
        # The record is produced after the fetch is sent: had the fetch not waited, it would have
        # been answered nothing.
        timer = threading.Timer(0.3, produce, (producer, topic, 3))
        timer.start()
        try:
            result = fetch(c, sid, 1, {}, max_wait=10_000, min_bytes=1)
        finally:
            timer.join()
        assert result == (0, sid, {(topic, 3): (1, True)})
        # With nothing coming, it is answered nothing once its max_wait is over.
        assert fetch(c, sid, 2, {(topic, 3): 1}, max_wait=100, min_bytes=1) == (0, sid, {})


def test_a_session_with_topic_ids_and_the_version_mismatch(broker, unique):
    topic = unique("fsid")
    with AdminClient(broker.bootstrap) as c:
        create(c, topic, 2)
        ids = {topic: broker.broker.logs.topic(topic).topic_id}
        error, sid, got = fetch(c, 0, 0, {(topic, 0): 0, (topic, 1): 0}, version=13, topic_ids=ids)
        assert error == 0 and sid != 0 and set(got) == {(topic, 0), (topic, 1)}
        produce(c, topic, 1)
        assert fetch(c, sid, 1, {}, version=13, topic_ids=ids) == (0, sid, {(topic, 1): (1, True)})
        # A session made with topic ids is asked without them: FETCH_SESSION_TOPIC_ID_ERROR.
        assert fetch(c, sid, 2, {}, version=12) == (TOPIC_ID_ERROR, 0, {})


def test_the_cache_slots_bound_the_sessions(start_broker, unique):
    topic = unique("fsc")
    with start_broker(max_incremental_fetch_session_cache_slots="1") as broker, AdminClient(broker.bootstrap) as c:
        create(c, topic, 1)
        _, first, _ = fetch(c, 0, 0, {(topic, 0): 0})
        # The one slot is taken by a young session: the next client gets none (full fetches go on).
        assert fetch(c, 0, 0, {(topic, 0): 0})[:2] == (0, 0)
        assert fetch(c, first, 1, {})[:2] == (0, first)
    with start_broker(max_incremental_fetch_session_cache_slots="0") as broker, AdminClient(broker.bootstrap) as c:
        create(c, topic, 1)
        assert fetch(c, 0, 0, {(topic, 0): 0})[:2] == (0, 0)  # sessions turned off


def parts(n):
    return {("t", i): CachedPartition("t", None, i, 0, 1) for i in range(n)}


def test_eviction_follows_kafkas_fetch_session_cache():
    cache = FetchSessionCache(2, eviction_ms=1000)
    a = cache.maybe_create(0, False, False, parts(5))
    b = cache.maybe_create(10, False, False, parts(3))
    assert a and b and cache.partitions == 8
    # Both are younger than the eviction time: an ordinary client finds no slot.
    assert cache.maybe_create(500, False, False, parts(10)) is None
    # A privileged one (a follower) may evict an unprivileged one: the smallest goes.
    follower = cache.maybe_create(600, True, False, parts(1))
    assert follower is not None and cache.get(b.id) is None and cache.get(a.id) is a
    # Past the eviction time a session unused that long goes first, whatever its size.
    cache.touch(follower, 1500)
    late = cache.maybe_create(1700, False, False, parts(1))
    assert late is not None and cache.get(a.id) is None and cache.evictions == 2
    # Old enough but recently used: the least valuable one goes, if the newcomer is worth more (an
    # unprivileged session before a privileged one, then the smaller).
    cache.touch(late, 2600)
    cache.touch(follower, 2600)
    assert cache.maybe_create(2650, False, False, parts(4)) is None  # `late` is not old enough yet
    assert cache.maybe_create(2800, False, False, parts(1)) is None  # no larger than `late`
    bigger = cache.maybe_create(2800, False, False, parts(4))
    assert bigger is not None and cache.get(late.id) is None and cache.get(follower.id) is follower
