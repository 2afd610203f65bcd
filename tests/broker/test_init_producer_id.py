"""InitProducerId and epochs over the wire: fresh PIDs are never reused (even across a restart),
re-initialising with the current PID and epoch bumps the epoch (KIP-360), an older epoch is fenced,
and the partitions then hold the producer to its new epoch."""

from minibroker.admin_client import AdminClient
from tests.support.batches import make_batch
from tests.support.wire import produced


def init(c, pid=-1, epoch=-1, version=None, transactional_id=None):
    r = c.call(22, {"transactional_id": transactional_id, "transaction_timeout": 60000,
                    "producer_id": pid, "producer_epoch": epoch}, version=version)
    return int(r.error_code), r.producer_id, r.producer_epoch


def produce(c, topic, pid, epoch, sequence):
    """The error code of one batch of producer `pid` at `epoch` from `sequence`."""
    batch = make_batch([(b"k", b"v")], producer_id=pid, producer_epoch=epoch, base_sequence=sequence)
    return int(produced(c, topic, batch).error_code)


def test_epoch_bump_fencing_and_the_new_epoch_in_the_partition(broker, unique):
    topic = unique("epochs")
    with AdminClient(broker.bootstrap) as c:
        c.call(19, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                                "assignments": (), "configs": ()}], "timeout": 5000, "validate_only": False})
        code, pid, epoch = init(c)
        assert (code, epoch) == (0, 0)
        assert produce(c, topic, pid, 0, 0) == 0
        assert init(c, pid, 0, version=4) == (0, pid, 1)  # bumped, same PID
        assert init(c, pid, 0, version=4)[0] == 90  # the old epoch is fenced: PRODUCER_FENCED
        assert init(c, pid, 0, version=3)[0] == 47  # before v4: INVALID_PRODUCER_EPOCH
        assert produce(c, topic, pid, 1, 5) == 45  # a new epoch must start at sequence 0
        assert produce(c, topic, pid, 1, 0) == 0
        assert produce(c, topic, pid, 0, 1) == 47  # the partition fences the old epoch too
        # A transactional id gets its own producer id from the same never-reused allocator.
        code, txn_pid, txn_epoch = init(c, transactional_id="txn")
        assert (code, txn_epoch) == (0, 0) and txn_pid > pid


def test_epoch_exhaustion_gives_a_fresh_pid(broker):
    with AdminClient(broker.bootstrap) as c:
        _, pid, _ = init(c)
        code, new_pid, epoch = init(c, pid, 32767, version=4)
        assert code == 0 and new_pid != pid and epoch == 0


def test_pids_are_never_reused_across_restarts(start_broker):
    """(A crash between block reservations is covered by tests/storage/test_producer_ids.py.)"""
    seen = set()
    for _ in range(3):
        with start_broker() as broker, AdminClient(broker.bootstrap) as c:
            pids = {init(c)[1] for _ in range(5)}
        assert len(pids) == 5 and not seen & pids
        seen |= pids


def test_fresh_producer_ids_leave_nothing_behind(broker, unique):
    """Kafka allocates a non-transactional PID blindly and keeps nothing per id; so does minibroker:
    a storm of InitProducerId costs no memory per id. Only a KIP-360 bump of a PID that has producer
    state is remembered (to fence the epoch it replaced), and a PID without state is bumped as asked."""
    topic = unique("fresh")
    with AdminClient(broker.bootstrap) as c:
        c.call(19, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1,
                                "assignments": (), "configs": ()}], "timeout": 5000, "validate_only": False})
        pids = [init(c)[1] for _ in range(300)]
        assert len(set(pids)) == 300
        assert broker.broker.producer_ids.remembered == 0
        idle = pids[0]  # never produced: no producer state, so nothing to fence with
        assert init(c, idle, 0, version=4) == (0, idle, 1)
        assert init(c, idle, 0, version=4) == (0, idle, 1)
        assert broker.broker.producer_ids.remembered == 0
        active = pids[1]
        assert produce(c, topic, active, 0, 0) == 0
        assert init(c, active, 0, version=4) == (0, active, 1)
        assert broker.broker.producer_ids.remembered == 1


def test_a_producer_id_without_an_epoch_or_the_reverse_is_invalid_request(broker, unique):
    # Kafka's KafkaApis.handleInitProducerIdRequest: (-1, -1) asks for a fresh id, (id >= 0, epoch >= 0)
    # names the current one; one without the other is INVALID_REQUEST (42), answered -1/-1, nothing done.
    tid = unique("tid")
    with AdminClient(broker.bootstrap) as c:
        _, pid, _ = init(c)
        for transactional_id in (None, tid):
            assert init(c, pid, -1, version=4, transactional_id=transactional_id) == (42, -1, -1)
            assert init(c, -1, 0, version=3, transactional_id=transactional_id) == (42, -1, -1)
        r = c.call(65, {"transactional_ids": [tid]})
        assert int(r.transaction_states[0].error_code) == 105  # the transactional id was never created
        assert init(c, pid, 0, version=4) == (0, pid, 1)  # the well-formed request still bumps
