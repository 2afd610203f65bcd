"""Kafka Streams 4.4 (Apache Kafka's Java library, tests/java/StreamsApps.java) against minibroker,
each application run on both rebalance protocols at once in one JVM (group.protocol=classic, and
group.protocol=streams: KIP-1071's StreamsGroupHeartbeat, the broker assigning the tasks and creating
the internal topics), with no standby replicas:

- word count: lines -> words -> a repartition topic -> a counting state store with its changelog
  topic -> the output; stopped, then restarted on a new, empty state directory (so its store is
  restored from the changelog, no standby to take over), and it carries on counting where it left;
- exactly once (processing.guarantee=exactly_once_v2): a per-key count whose every update is
  emitted, while the broker process is killed -9 and restarted on its address; a read_committed
  reader then sees each key's updates 1, 2, ..., n exactly once (an at-least-once application would
  repeat some after the crash).
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from minibroker.admin_client import AdminClient
from tests.support.broker_process import BrokerProcess
from tests.support.clients import Confluent, Message
from tests.support.txn_wire import create

pytestmark = pytest.mark.interop

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon"]


def lines(start: int, count: int) -> list[Message]:
    """Line i holds WORDS[i % 5] once and WORDS[(i + 1) % 5] twice."""
    out = []
    for i in range(start, start + count):
        text = f"{WORDS[i % 5]} {WORDS[(i + 1) % 5]}, {WORDS[(i + 1) % 5].upper()}!"
        out.append(Message(i % 2, f"line-{i}".encode(), text.encode(), ()))
    return out


def expected_counts(count: int) -> Counter:
    counts: Counter = Counter()
    for i in range(count):
        counts[WORDS[i % 5]] += 1
        counts[WORDS[(i + 1) % 5]] += 2
    return counts


def read_all(bootstrap: str, topic: str, partitions: int, want: int, timeout: float = 90, **config):
    records = Confluent().consume(bootstrap, topic, partitions, want, timeout=timeout, **config)
    return [(key.decode(), value.decode()) for _, _, key, value, _ in sorted(records, key=lambda r: (r[0], r[1]))]


PROTOCOLS = ("classic", "streams")


def wait_running(app, timeout: float = 60) -> None:
    """Until the application runs on every protocol."""
    deadline = time.monotonic() + timeout
    while any("RUNNING" not in app.states(p) for p in PROTOCOLS) and time.monotonic() < deadline:
        assert app.proc.poll() is None, f"the application exited: {app.lines}"
        time.sleep(0.1)
    assert all("RUNNING" in app.states(p) for p in PROTOCOLS), app.lines


def test_word_count_with_a_restart_restoring_its_store_from_the_changelog(streams, java, broker, unique, tmp_path):
    source, sink, app_id = unique("wc-in"), unique("wc-out"), unique("wc")
    bs = broker.bootstrap
    with AdminClient(bs) as c:
        create(c, source, 2)
        for protocol in PROTOCOLS:
            create(c, f"{sink}-{protocol}", 2)
    Confluent().produce(bs, source, lines(0, 20))
    app = streams.start("word-count", bs, app_id, tmp_path / "state-1", source, sink, protocols=PROTOCOLS)
    try:
        wait_running(app)
        first = {p: read_all(bs, f"{sink}-{p}", 2, 60) for p in PROTOCOLS}  # 3 words a line: one update each
        # Java's Admin describes the running streams group as kafka-streams-groups.sh does.
        described = next(line for line in java.run(["streams-group", bs, f"{app_id}-streams"])
                         if line["type"] == "streams-group")
    finally:
        app.stop()
    assert (described["state"], described["topology_epoch"]) == ("Stable", 0), described
    assert described["subtopologies"] == {
        "0": {"sources": [source], "changelogs": [], "repartition_sources": []},
        "1": {"sources": [], "changelogs": [f"{app_id}-streams-word-counts-changelog"],
              "repartition_sources": [f"{app_id}-streams-words-repartition"]}}, described
    (member,) = described["members"]
    assert member["active"] == {"0": [0, 1], "1": [0, 1]} and member["epoch"] == described["assignment_epoch"]
    assert app.closed() and not app.errors(), app.lines
    for protocol in PROTOCOLS:
        assert len(first[protocol]) == 60, protocol
        assert {word: int(count) for word, count in first[protocol]} == dict(expected_counts(20)), protocol
    # Each application has its repartition topic and its store's changelog (compacted): created by
    # Streams through CreateTopics on the classic protocol, by the broker's coordinator from the
    # topology on the streams protocol, with the partition counts it decided.
    logs = broker.broker.logs
    for protocol in PROTOCOLS:
        repartition = logs.topic(f"{app_id}-{protocol}-words-repartition")
        changelog = logs.topic(f"{app_id}-{protocol}-word-counts-changelog")
        assert repartition is not None and changelog is not None, protocol
        assert repartition.num_partitions == changelog.num_partitions == 2
        assert "compact" in logs.log(changelog.name, 0).config.cleanup_policy
    group = broker.broker.groups.groups[f"{app_id}-streams"]
    assert (group.group_type, group.state_name) == ("streams", "Empty")  # its member left on close
    # A restart on an empty state directory: the store comes back from the changelog.
    Confluent().produce(bs, source, lines(20, 10))
    app = streams.start("word-count", bs, app_id, tmp_path / "state-2", source, sink, protocols=PROTOCOLS)
    try:
        wait_running(app)
        everything = {p: read_all(bs, f"{sink}-{p}", 2, 90) for p in PROTOCOLS}
    finally:
        app.stop()
    assert app.closed() and not app.errors(), app.lines
    for protocol in PROTOCOLS:
        assert len(everything[protocol]) == 90, protocol
        final: dict = {}
        for word, count in everything[protocol]:
            final[word] = max(final.get(word, 0), int(count))
        assert final == dict(expected_counts(30)), protocol
    # The stopped application's group: its committed offsets (the source's and the repartition
    # topic's partitions, read to their ends), then deleted with Admin.deleteStreamsGroups.
    # alterStreamsGroupOffsets and deleteStreamsGroupOffsets (on the Empty group) before that.
    out = java.run(["streams-group", bs, f"{app_id}-streams", "delete"])
    empty, offsets, changed, deleted, gone = [line for line in out if line["type"].startswith("streams-group")]
    assert (empty["state"], empty["members"]) == ("Empty", []), empty
    assert sum(v for k, v in offsets["offsets"].items() if k.startswith(source)) == 30, offsets
    assert {k.rsplit("-", 1)[0] for k in offsets["offsets"]} == {source, f"{app_id}-streams-words-repartition"}
    expected = {k: v for k, v in offsets["offsets"].items() if k != changed["last"]}
    assert changed["offsets"] == {**expected, changed["first"]: 0}, changed
    assert deleted["error"] == "" and gone["error"] == "GroupIdNotFoundException", (deleted, gone)


def test_exactly_once_v2_through_a_broker_kill_9(streams, tmp_path, unique):
    source, sink, app_id = unique("eos-in"), unique("eos-out"), unique("eos")
    keys, per_key = 10, 60
    broker = BrokerProcess(tmp_path / "data", overrides={
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"})
    bs = broker.start()
    app = None
    committed = {"isolation.level": "read_committed"}
    try:
        with AdminClient(bs) as c:
            create(c, source, 2)
            for protocol in PROTOCOLS:
                create(c, f"{sink}-{protocol}", 2)
        records = [Message(k % 2, f"key-{k}".encode(), b"x", ()) for _ in range(per_key) for k in range(keys)]
        Confluent().produce(bs, source, records[: len(records) // 2])
        app = streams.start("sum", bs, app_id, tmp_path / "state", source, sink, "exactly_once_v2",
                            protocols=PROTOCOLS)
        wait_running(app)
        # Kill the broker while the applications are in the middle of their input, then bring it
        # back: the streams group comes back from its records in __consumer_offsets.
        for protocol in PROTOCOLS:
            read_all(bs, f"{sink}-{protocol}", 2, len(records) // 4, timeout=60, **committed)
        broker.kill()
        logged_before_restart = len(broker.log())
        broker.restart()
        Confluent().produce(bs, source, records[len(records) // 2:])
        out = {p: read_all(bs, f"{sink}-{p}", 2, len(records), timeout=120, **committed) for p in PROTOCOLS}
        app.stop()
        assert app.closed() and not app.errors(), app.lines
        # The streams group came back from its records: its member went on at its epoch, it never
        # had to join again (a lost group answers GROUP_ID_NOT_FOUND and the member rejoins).
        joins = f"group {app_id}-streams: member "
        log = broker.log()
        assert joins in log[:logged_before_restart] and "joins the streams group" in log[:logged_before_restart]
        assert not [line for line in log[logged_before_restart:].splitlines()
                    if joins in line and "joins the streams group" in line]
    finally:
        if app is not None:
            app.stop()
        broker.stop()
    for protocol in PROTOCOLS:
        by_key: dict = {}
        for key, value in out[protocol]:
            by_key.setdefault(key, []).append(int(value))
        # Exactly once: each key's updates are 1..n, none repeated, none missing.
        assert {key: values for key, values in by_key.items() if values != list(range(1, per_key + 1))} == {}, protocol
        assert len(by_key) == keys, protocol
