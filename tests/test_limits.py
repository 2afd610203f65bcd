"""Resource limits (minibroker/limits.py, README "Limits and failure behaviour"): what a client can
make the broker take on is bounded, and what is refused is answered, not a dropped connection.

Partitions: max.broker.partitions (derived from the open-file limit by default) bounds Metadata
auto-creation and CreateTopics; KRaft's 10,000 partitions per CreateTopics request.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from minibroker.limits import derived_max_partitions, max_broker_partitions
from protocol.entities import build
from tests.test_broker_wire import create_topic, ms
from tests.wire import WireClient, schema

MINIBROKER = [sys.executable, "-m", "minibroker.cli"]


def metadata(client, names, version=12, allow=True):
    return client.request(build(schema(3, version), {
        "topics": [{"name": n, "topic_id": None} for n in names], "allow_auto_topic_creation": allow,
        "include_topic_authorized_operations": False}))


def create_topics(client, specs, validate_only=False):
    req = schema(19, 7)
    mod = __import__(req.__module__, fromlist=["CreatableTopic"])
    topics = tuple(mod.CreatableTopic(name=n, num_partitions=p, replication_factor=-1, assignments=(), configs=())
                   for n, p in specs)
    return client.request(req(topics=topics, timeout=ms(5000), validate_only=validate_only)).topics


# ---- partitions ------------------------------------------------------------------------------------


def test_the_default_partition_cap_leaves_room_for_connections_and_files():
    assert derived_max_partitions(20_000) == (20_000 - 1024) // 4
    assert derived_max_partitions(1024) == 1  # never zero: a broker can always hold a topic
    assert max_broker_partitions(None, 20_000) == derived_max_partitions(20_000)
    assert max_broker_partitions(50, 20_000) == 50


def user_topics(broker) -> list[str]:
    return sorted(broker.in_broker(lambda: [t.name for t in broker.broker.logs.topics() if not t.name.startswith("__")]))


def test_metadata_auto_creates_up_to_the_cap_then_answers_unknown_topic(start_broker, unique):
    names = [unique("auto") for _ in range(4)]
    with start_broker(num_partitions="2", max_broker_partitions="6") as broker, WireClient(broker.bootstrap) as c:
        response = metadata(c, names[:3] + ["bad/name"] + names[3:])
        codes = [t.error_code for t in response.topics]
        # __consumer_offsets holds 1, then 2 + 2 fit; a third topic would make 7 > 6.
        assert codes == [0, 0, 3, 17, 3]
        assert [len(t.partitions) for t in response.topics[:2]] == [2, 2]
        assert user_topics(broker) == sorted(names[:2])
        # An explicit CreateTopics of one partition still fits.
        assert create_topic(c, unique("one"), 1).error_code == 0


def test_create_topics_over_the_cap_is_a_policy_violation_naming_the_limit(start_broker, unique):
    a, b, c_name = unique("cap"), unique("cap"), unique("cap")
    with start_broker(max_broker_partitions="11") as broker, WireClient(broker.bootstrap) as c:
        results = create_topics(c, [(a, 6), (b, 6), ("bad/name", 6), (c_name, 4)])
        assert [r.error_code for r in results] == [0, 44, 17, 0]  # with __consumer_offsets' 1: 7, 13, -, 11
        assert "max.broker.partitions=11" in results[1].error_message
        assert "holds 7" in results[1].error_message
        (checked,) = create_topics(c, [(unique("cap"), 1)], validate_only=True)
        assert checked.error_code == 44  # validate_only applies the same policy
        assert not list(broker.data_dir.glob(f"{b}-*"))


def test_a_create_topics_of_8000_partitions_is_answered(start_broker, unique):
    """It used to run the broker out of file descriptors and close the connection."""
    with start_broker(max_broker_partitions="100") as broker, WireClient(broker.bootstrap) as c:
        (result,) = create_topics(c, [(unique("huge"), 8000)])
        assert result.error_code == 44 and "8000" in result.error_message
        assert metadata(c, [], version=1).brokers


def test_more_than_10000_partitions_in_one_request_is_refused_whole_as_kraft_does(broker, unique):
    names = [unique("many") for _ in range(3)]
    with WireClient(broker.bootstrap) as c:
        results = create_topics(c, [(names[0], 5000), (names[1], 5000), (names[2], 1)])
        assert [r.error_code for r in results] == [44, 44, 44]
        assert {r.error_message for r in results} == {"Excessively large number of partitions per request."}
        assert metadata(c, names, allow=False).topics[0].error_code == 3


def test_7000_unknown_topics_in_one_metadata_request_leave_the_broker_serving(tmp_path):
    """The reported attack: one anonymous Metadata naming 7,000 unknown topics auto-created them
    all (3 files each) and ran the process out of file descriptors. With an open-file limit of
    1,536 the derived cap is 128 partitions: with __consumer_offsets' one, 127 topics are created,
    the rest answered UNKNOWN_TOPIC_OR_PARTITION, and every client is still served."""
    import resource

    def low_file_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (1536, 1536))

    proc = subprocess.Popen(
        MINIBROKER + ["serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d"),
                      "--log-level", "WARNING"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=low_file_limit,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("minibroker ready"), proc.stderr.read()
        bootstrap = line.split("bootstrap.servers=")[1].split()[0]
        with WireClient(bootstrap, timeout=120) as c:
            response = metadata(c, [f"flood-{i}" for i in range(7000)], version=4)
            codes = [t.error_code for t in response.topics]
            assert derived_max_partitions(1536) == 128
            assert codes.count(0) == 127 and codes.count(3) == 7000 - 127
        clients = [WireClient(bootstrap) for _ in range(50)]  # files are left for connections
        try:
            for client in clients:
                assert client.request(schema(18, 0)()).error_code == 0
        finally:
            for client in clients:
                client.close()
        open_files = len(os.listdir(f"/proc/{proc.pid}/fd")) if os.path.isdir("/proc") else 0
        assert open_files < 1536 - 1000
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=60)
    assert "auto-creation of 6873 topic(s) refused, max.broker.partitions=128 reached" in stderr
    assert "Traceback" not in stderr
