"""Quotas enforced: the request-time quota (request_percentage, KIP-124), the controller-mutation
quota (controller_mutation_rate, KIP-599) and the connection-creation quota (connection_creation_rate
on an IP, KIP-612), each driven over its limit; throttle times are compared within the engine's
stated tolerance (THROTTLE_TOLERANCE). The byte-rate quota's scenario and AlterClientQuotas' and
DescribeClientQuotas' own answers are in admin.py.

Each scenario names its own client id (or, for the IP quota, connects from its own loopback
address, 127.0.0.2), so that its quota touches no other scenario's requests.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from tests.support.conformance import Run, scenario


def set_quota(run: Run, entity: list[tuple[str, str | None]], key: str, value: float | None) -> None:
    """Set (or with None remove) one quota of `entity`, and wait until the broker enforces it.

    Kafka applies a quota change through its metadata log: DescribeClientQuotas shows it once the
    broker's metadata image has it, and the quota managers take it from the same image a moment
    later (a publisher after the metadata cache's), so a short pause follows what Describe shows."""
    run.call(49, 1, {"entries": [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                                  "ops": [{"key": key, "value": value or 0.0, "remove": value is None}]}],
                     "validate_only": False}, record=False)

    def applied() -> bool:
        response = run.call(48, 1, {"components": [{"entity_type": t, "match_type": 0, "match": n} for t, n in entity],
                                    "strict": True}, record=False)
        values = {v.key: v.value for e in response.entries or () for v in e.values}
        return values.get(key) == value

    run.wait_until(applied, timeout=20)
    time.sleep(0.3)


def timed_call(run: Run, api_key: int, version: int, body: dict[str, Any], *, conn: str, label: str) -> None:
    """A call whose round trip is recorded beside its answer, as a throttle time (compared within
    the tolerance): how long the broker held the response back, or kept the channel muted before
    reading the request (KIP-219)."""
    started = time.monotonic()
    run.call(api_key, version, body, conn=conn, label=label)
    # At least 1: a throttle time of 0 is compared exactly, a round trip never is.
    run.note(f"{label}: round trip", {"throttle_time_round_trip_ms": max(1, round((time.monotonic() - started) * 1000))})


METADATA_NONE = {"topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}


@scenario("quotas/request-time", apis=(3, 48, 49))
def _(run: Run) -> None:
    """request_percentage (KIP-124) far below any request's thread time: every request of the
    client id is over it and throttled for the cap, one quota window (1000 ms). Metadata v12 (the
    client throttles itself, KIP-219: answered at once, the channel muted for the throttle time, so
    the next request waits), Metadata v4 (an older client, which does not wait by itself: answered
    at once all the same, its connection muted), another client id unthrottled."""
    client = run.name("client")
    set_quota(run, [("client-id", client)], "request_percentage", 0.000001)
    run.conn("new", client_id=client)
    run.call(3, 12, METADATA_NONE, conn="new", label="Metadata v12 over the quota")
    timed_call(run, 3, 12, METADATA_NONE, conn="new", label="the next request on the muted channel")
    run.conn("old", client_id=client)
    timed_call(run, 3, 4, METADATA_NONE, conn="old", label="Metadata v4 over the quota")
    run.call(3, 12, METADATA_NONE, label="another client id")
    set_quota(run, [("client-id", client)], "request_percentage", None)


def _create(run: Run, version: int, topics: list[tuple[str, int]], *, conn: str, label: str) -> None:
    # The configs a CreateTopics answers (v5+) are the configs scenarios' to compare: left out here.
    run.call(19, version, {"topics": [{"name": name, "num_partitions": count, "replication_factor": 1, "configs": []}
                                      for name, count in topics], "timeout": 30000, "validate_only": False},
             conn=conn, label=label, drop=("configs",))


@scenario("quotas/controller-mutation", apis=(19, 20, 37, 49))
def _(run: Run) -> None:
    """controller_mutation_rate (KIP-599) of 1 partition/s: a token bucket of 11 (quota.window.num x
    quota.window.size.seconds x the rate), full at first. Strict requests (CreateTopics v6+,
    DeleteTopics v5+, CreatePartitions v3+) take a topic while the bucket is not in debt, even into
    debt, and refuse the topics after it with THROTTLING_QUOTA_EXCEEDED and the time to pay the debt
    back; an older CreateTopics (v5) is accepted and throttled; another client id is not throttled.
    Each request over the quota on a connection of its own (its channel is muted meanwhile)."""
    client = run.name("client")
    a, b, c, d, e = (run.name(x) for x in "abcde")
    set_quota(run, [("client-id", client)], "controller_mutation_rate", 1.0)
    for name in ("strict", "permissive", "delete", "grow"):
        run.conn(name, client_id=client)
    _create(run, 7, [(a, 10), (b, 5), (c, 1)], conn="strict", label="10, 5 and 1 partitions in one request")
    _create(run, 5, [(d, 1)], conn="permissive", label="CreateTopics v5 in debt")
    run.call(20, 6, {"topics": [{"name": a, "topic_id": 0}], "timeout": 30000}, conn="delete",
             label="DeleteTopics v6 in debt")
    run.call(37, 3, {"topics": [{"name": b, "count": 6, "assignments": None}], "timeout": 30000,
                     "validate_only": False}, conn="grow", label="CreatePartitions v3 in debt")
    _create(run, 7, [(e, 1)], conn="main", label="another client id")


LOOPBACK_2 = "127.0.0.2"  # this scenario's own source address: its IP quota limits no one else


@scenario("quotas/connection-creation", apis=(18, 48, 49))
def _(run: Run) -> None:
    """connection_creation_rate (KIP-612) of 1 per second on an IP: its rate is measured over the
    quota window (11 samples of 1 s, at least 10 s at first), so ten connections in a moment are
    admitted and the eleventh and twelfth are over it: accepted, never read, held for the throttle
    time and closed. Once the quota is removed the IP connects again."""
    set_quota(run, [("ip", LOOPBACK_2)], "connection_creation_rate", 1.0)
    outcomes: list[Any] = []
    for i in range(12):
        outcomes.append(_connect_from(run, f"c{i}", LOOPBACK_2))
    run.note("12 connections from the IP", [o if isinstance(o, str) else "closed" for o in outcomes])
    run.note("refused connections held for", [{"throttle_time_held_ms": o} for o in outcomes if not isinstance(o, str)])
    for i in range(12):
        run.close(f"c{i}")
    set_quota(run, [("ip", LOOPBACK_2)], "connection_creation_rate", None)
    run.note("after the quota is removed", _connect_from(run, "after", LOOPBACK_2))


def _connect_from(run: Run, name: str, ip: str) -> str | int:
    """Connect from `ip` and send ApiVersions: "answered", "no answer" (within 5 s), or how many ms
    after connecting the broker closed the connection unanswered."""
    started = time.monotonic()
    conn = run.conn(name, source_ip=ip)
    run.send(18, 3, {"client_software_name": "conformance", "client_software_version": "1"}, conn=name)
    conn.sock.settimeout(5)
    try:
        first = conn.sock.recv(1, socket.MSG_PEEK)
    except (ConnectionResetError, BrokenPipeError):
        first = b""
    except socket.timeout:
        return "no answer"
    if first == b"":
        return round((time.monotonic() - started) * 1000)
    conn.sock.settimeout(run.timeout)
    run.recv(conn=name, record=False)
    return "answered"
