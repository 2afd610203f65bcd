"""What Kafka 4 clients use at their defaults: transactions version 2 (KIP-890 part 2: Produce v12
adding its partition, EndTxn v5 bumping the epoch, TxnOffsetCommit v5 adding the offsets partition),
UpdateFeatures on `transaction.version` (refusals and dry runs only: the reference Kafka is shared
by the whole corpus), incremental fetch sessions (KIP-227), and whether client telemetry (KIP-714)
is advertised."""

from __future__ import annotations

import uuid

from tests.conformance.corpus import create_topic, fetch, find_coordinator, init_producer_id, produce
from tests.conformance.corpus.transactions import end_txn, settle, txn_batch
from tests.support.batches import make_batch
from tests.support.conformance import Run, scenario


@scenario("transactions/version-2", apis=(26, 0, 28))
def _(run: Run) -> None:
    """A producer on transactions version 2, as Java 4's: no AddPartitionsToTxn (Produce v12 adds the
    partition), EndTxn v5 answering the bumped epoch, a retry of that end (the old epoch) answered
    again, the ended transaction's epoch fenced for the next batch, an abort with nothing added
    (another bump), TxnOffsetCommit v5 without AddOffsetsToTxn."""
    topic, txn, group = run.name("t"), run.name("txn"), run.name("g")
    create_topic(run, topic)
    # Kafka's replica may answer NOT_LEADER_OR_FOLLOWER for a moment after Metadata shows the leader
    # (a producer retries): wait until a read of the partition is answered.
    run.wait_until(lambda: fetch(run, topic, record=False).responses[0].partitions[0].error_code == 0)
    find_coordinator(run, txn, 1)
    find_coordinator(run, group)
    init = init_producer_id(run, txn, version=5)
    pid, epoch = init.producer_id, init.producer_epoch
    produce(run, topic, txn_batch(["v2a"], pid, epoch, 0), transactional_id=txn, version=12,
            label="Produce v12, partition not added")
    commit = end_txn(run, txn, pid, epoch, True, version=5, label="EndTxn v5 commit")
    settle(run, txn)
    end_txn(run, txn, pid, epoch, True, version=5, label="EndTxn v5 retried with the old epoch")
    produce(run, topic, txn_batch(["late"], pid, epoch, 1), transactional_id=txn, version=12,
            label="a batch at the ended transaction's epoch")
    bumped = commit.producer_epoch
    end_txn(run, txn, pid, bumped, False, version=5, label="EndTxn v5 abort with nothing added")
    settle(run, txn)
    end_txn(run, txn, pid, bumped, True, version=5, label="EndTxn v5 commit after that abort, old epoch")
    epoch = bumped + 1
    run.call(28, 5, {"transactional_id": txn, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
                     "generation_id": -1, "member_id": "", "group_instance_id": None,
                     "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                                "committed_leader_epoch": -1,
                                                                "committed_metadata": ""}]}]},
             label="TxnOffsetCommit v5 without AddOffsetsToTxn")
    end_txn(run, txn, pid, epoch, True, version=5, label="EndTxn v5 commit of the offsets")
    settle(run, txn)
    run.call(9, 8, {"groups": [{"group_id": group, "topics": None}], "require_stable": True},
             label="the committed offset")


@scenario("features/update-refusals", apis=(57,))
def _(run: Run) -> None:
    """UpdateFeatures on transaction.version: a downgrade without a downgrade type, an unknown
    feature, a level above the supported range, and a dry run of a safe downgrade (nothing changes:
    the reference is shared)."""
    def update(feature, level, upgrade_type, validate_only, label, version=1):
        run.call(57, version, {"timeout": 30000, "validate_only": validate_only, "feature_updates": [
            {"feature": feature, "max_version_level": level, "upgrade_type": upgrade_type}]}, label=label)

    update("transaction.version", 1, 1, True, "downgrade as an upgrade")
    update("no.such.feature", 1, 1, True, "unknown feature")
    update("transaction.version", 7, 1, True, "level above the range")
    update("transaction.version", 1, 2, True, "safe downgrade, validate only")
    update("transaction.version", 1, 2, True, "safe downgrade, validate only, v2", version=2)


@scenario("fetch/sessions", apis=(1,))
def _(run: Run) -> None:
    """Incremental fetch sessions at Fetch v12: a full fetch asking for a session, an incremental
    fetch with nothing new, one after a record was produced to one partition (only it is answered),
    the same epoch twice (INVALID_FETCH_SESSION_EPOCH), an unknown session id
    (FETCH_SESSION_ID_NOT_FOUND), and the session closed (epoch -1)."""
    topic = run.name("t")
    create_topic(run, topic, partitions=2)
    produce(run, topic, make_batch([(None, b"a")], timestamp_ms=1_700_000_000_000), record=False)

    def fetch(session_id, epoch, partitions, label, record=True):
        return run.call(1, 12, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 52428800, "isolation_level": 0,
            "session_id": session_id, "session_epoch": epoch, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": topic, "partitions": [
                {"partition": p, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": 1048576} for p, offset in partitions.items()]}]
            if partitions else []}, label=label, record=record)

    # Kafka's replicas of a new topic may answer NOT_LEADER_OR_FOLLOWER for a moment after Metadata
    # shows the leader: a consumer fetches until they lead, and so does this scenario (sessionless).
    run.wait_until(lambda: all(p.error_code == 0 for t in fetch(0, -1, {0: 0, 1: 0}, "", record=False).responses
                               for p in t.partitions))
    full = fetch(0, 0, {0: 0, 1: 0}, "full fetch asking for a session")
    session = full.session_id
    fetch(session, 1, {0: 1}, "incremental, nothing new")
    produce(run, topic, make_batch([(None, b"b")], timestamp_ms=1_700_000_000_000), partition=1, record=False)
    fetch(session, 2, {}, "incremental after a record in partition 1")
    fetch(session, 2, {}, "the same epoch again")
    fetch(session + 1 if session else 1, 1, {}, "unknown session id")
    fetch(session, -1, {0: 1, 1: 1}, "the session closed")


@scenario("telemetry/advertised", apis=(71, 72))
def _(run: Run) -> None:
    """Whether GetTelemetrySubscriptions and PushTelemetry (KIP-714) are in ApiVersions: Kafka lists
    them only with a metrics reporter that takes client telemetry; minibroker always has one (its
    metrics endpoint). The requests themselves are covered by tests/broker/test_telemetry.py."""
    response = run.call(18, 4, {"client_software_name": "conformance", "client_software_version": "1.0"},
                        record=False)
    run.note("telemetry APIs advertised", sorted(int(k.api_key) for k in response.api_keys if k.api_key in (71, 72)))


@scenario("telemetry/requests", apis=(71, 72))
def _(run: Run) -> None:
    """GetTelemetrySubscriptions and PushTelemetry themselves (KIP-714), which Kafka serves whether
    or not it advertises them: a new instance's subscription (none: the default push interval, no
    metrics), the same asked again before the interval (throttled), pushes with the zero instance
    id, a wrong subscription id, another before the interval, a terminating one (taken whenever it
    comes), one after it and a GetTelemetrySubscriptions after it, and an unknown compression type. Each instance pushes nothing
    decodable, so nothing depends on a metrics reporter."""
    def get(instance, label):
        return run.call(71, 0, {"client_instance_id": instance}, label=label, drop=("subscription_id",))

    def push(instance, subscription, label, terminating=False, compression=0):
        run.call(72, 0, {"client_instance_id": instance, "subscription_id": subscription,
                         "terminating": terminating, "compression_type": compression, "metrics": b""},
                 label=label)

    first = get(uuid.UUID(int=0), "a new instance")
    instance, subscription = first.client_instance_id, first.subscription_id
    get(instance, "asked again at once")
    push(uuid.UUID(int=0), subscription, "push with the zero instance id")
    push(instance, subscription + 1, "push with another subscription id")
    push(instance, subscription, "push again before the interval")
    push(instance, subscription, "terminating push", terminating=True)
    push(instance, subscription, "push after terminating")
    get(instance, "asked after terminating")
    other = get(uuid.UUID(int=0), "a second instance")
    push(other.client_instance_id, other.subscription_id, "unknown compression type", compression=9)
