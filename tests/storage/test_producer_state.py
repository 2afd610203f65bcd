"""Unit tests for minibroker.storage.producer_state: each validation rule, expiry, and the snapshot files.

Headers are built by hand (BatchHeader objects), one rule per test, in both modes where the rule is
shared. The model-based test lives in test_producer_state_model.py.
"""

from __future__ import annotations

import logging

import pytest

from minibroker.protocol.errors import ErrorCode
from minibroker.protocol.records import BatchHeader
from minibroker.storage.producer_state import (
    DEFAULT_MAX_IN_FLIGHT,
    MAX_SEQUENCE,
    PRODUCER_SNAPSHOT,
    BatchMetadata,
    ProducerStateManager,
    list_snapshots,
    snapshot_path,
)
from tests.support.batches import PID, batch

NONE = ErrorCode.none
OUT_OF_ORDER_SEQUENCE_NUMBER = ErrorCode.out_of_order_sequence_number
DUPLICATE_SEQUENCE_NUMBER = ErrorCode.duplicate_sequence_number
INVALID_PRODUCER_EPOCH = ErrorCode.invalid_producer_epoch
INVALID_RECORD = ErrorCode.invalid_record

MODES = ["lean", "kafka"]


class Partition:
    """A fake partition log: assigns offsets and runs the broker's check/append/update sequence."""

    def __init__(self, psm: ProducerStateManager) -> None:
        self.psm = psm
        self.log_end = 0
        self.now_ms = 0

    def produce(self, header: BatchHeader):
        result = self.psm.prepare_update(header)
        if result.error_code == NONE and result.duplicate_of is None:
            appended = batch(
                header.producer_id,
                header.producer_epoch,
                header.base_sequence,
                header.records_count,
                base_offset=self.log_end,
            )
            self.psm.update(appended, self.now_ms)
            self.log_end += header.records_count
        return result

    def accept(self, header: BatchHeader) -> tuple[int, int]:
        base = self.log_end
        result = self.produce(header)
        assert (result.error_code, result.duplicate_of) == (NONE, None), result
        return base, self.log_end - 1


def codes(result) -> tuple[int, tuple[int, int] | None]:
    return result.error_code, result.duplicate_of


# --- rules shared by both modes -------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("first_seq", [0, 1, 77, MAX_SEQUENCE])
@pytest.mark.parametrize("epoch", [0, 5])
def test_unknown_producer_accepts_any_sequence_and_epoch(mode, first_seq, epoch):
    psm = ProducerStateManager.for_mode(mode)
    assert codes(psm.prepare_update(batch(epoch=epoch, first_seq=first_seq, count=3))) == (NONE, None)
    assert PID not in psm and psm.producer_id_count == 0


@pytest.mark.parametrize("mode", MODES)
def test_lower_epoch_is_fenced(mode):
    part = Partition(ProducerStateManager.for_mode(mode))
    part.accept(batch(epoch=3, first_seq=0))
    result = part.psm.prepare_update(batch(epoch=2, first_seq=1))
    assert codes(result) == (INVALID_PRODUCER_EPOCH, None)
    assert "epoch 2" in result.message


@pytest.mark.parametrize("mode", MODES)
def test_higher_epoch_must_start_at_zero(mode):
    part = Partition(ProducerStateManager.for_mode(mode))
    part.accept(batch(epoch=1, first_seq=0, count=10))
    out = (OUT_OF_ORDER_SEQUENCE_NUMBER, None)
    assert codes(part.psm.prepare_update(batch(epoch=2, first_seq=10))) == out
    assert codes(part.psm.prepare_update(batch(epoch=2, first_seq=1))) == out
    part.accept(batch(epoch=2, first_seq=0, count=2))
    entry = part.psm.last_entry(PID)
    assert (entry.producer_epoch, entry.first_seq, entry.last_seq) == (2, 0, 1)
    # The old epoch's batches are gone: resending one of them is now fenced.
    resend = batch(epoch=1, first_seq=0, count=10)
    assert codes(part.psm.prepare_update(resend)) == (INVALID_PRODUCER_EPOCH, None)


@pytest.mark.parametrize("mode", MODES)
def test_next_sequence_is_accepted(mode):
    part = Partition(ProducerStateManager.for_mode(mode))
    part.accept(batch(first_seq=0, count=3))
    part.accept(batch(first_seq=3, count=2))
    assert codes(part.psm.prepare_update(batch(first_seq=5))) == (NONE, None)
    assert codes(part.psm.prepare_update(batch(first_seq=6))) == (OUT_OF_ORDER_SEQUENCE_NUMBER, None)


@pytest.mark.parametrize("mode", MODES)
def test_sequence_wraps_from_int_max_to_zero(mode):
    part = Partition(ProducerStateManager.for_mode(mode))
    part.accept(batch(first_seq=MAX_SEQUENCE - 1, count=2))  # ends at 2147483647
    assert part.psm.last_entry(PID).last_seq == MAX_SEQUENCE
    assert codes(part.psm.prepare_update(batch(first_seq=MAX_SEQUENCE + 1))) != (NONE, None)  # not 2**31
    part.accept(batch(first_seq=0, count=3))
    # A batch may straddle the wrap: 2147483647, 0, 1.
    part.accept(batch(first_seq=3, count=1))
    part2 = Partition(ProducerStateManager.for_mode(mode))
    part2.accept(batch(first_seq=MAX_SEQUENCE, count=3))
    assert part2.psm.last_entry(PID).first_seq == MAX_SEQUENCE
    assert part2.psm.last_entry(PID).last_seq == 1
    part2.accept(batch(first_seq=2))


@pytest.mark.parametrize("mode", MODES)
def test_check_is_pure(mode):
    part = Partition(ProducerStateManager.for_mode(mode))
    part.accept(batch(first_seq=0, count=2))
    before = part.psm.last_entry(PID)
    headers = [
        batch(first_seq=2),
        batch(first_seq=0, count=2),
        batch(epoch=1, first_seq=0),
        batch(first_seq=9),
    ]
    for header in headers:
        part.psm.prepare_update(header)
        part.psm.prepare_update(header)
    assert part.psm.last_entry(PID) == before
    assert part.psm.prepare_update(batch(pid=7, first_seq=5)).error_code == NONE
    assert 7 not in part.psm


@pytest.mark.parametrize("mode", MODES)
def test_batches_without_producer_id_are_ignored(mode):
    psm = ProducerStateManager.for_mode(mode)
    header = batch(pid=-1, epoch=-1, first_seq=-1)
    assert codes(psm.prepare_update(header)) == (NONE, None)
    psm.update(header, 0)
    assert psm.producer_id_count == 0


@pytest.mark.parametrize("mode", MODES)
def test_producer_id_without_sequence_is_invalid(mode):
    psm = ProducerStateManager.for_mode(mode)
    assert psm.prepare_update(batch(first_seq=-1)).error_code == INVALID_RECORD


@pytest.mark.parametrize("mode", MODES)
def test_producers_are_independent(mode):
    part = Partition(ProducerStateManager.for_mode(mode))
    part.accept(batch(pid=1, first_seq=0))
    part.accept(batch(pid=2, first_seq=100))
    part.accept(batch(pid=1, first_seq=1))
    assert part.psm.prepare_update(batch(pid=2, first_seq=102)).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert codes(part.psm.prepare_update(batch(pid=2, first_seq=101))) == (NONE, None)
    assert part.psm.producer_id_count == 2 and 1 in part.psm and 2 in part.psm and 3 not in part.psm


def test_for_mode_builds_the_implementation_of_each_mode():
    from minibroker.storage.producer_state import (
        KafkaProducerStateManager,
        LeanProducerStateManager,
    )

    lean, kafka = ProducerStateManager.for_mode("lean"), ProducerStateManager.for_mode("kafka", 10, 100)
    assert type(lean) is LeanProducerStateManager and type(kafka) is KafkaProducerStateManager
    assert (kafka.mode, kafka.max_in_flight, kafka.expiration_ms) == ("kafka", 10, 100)


def test_constructor_rejects_bad_arguments():
    with pytest.raises(ValueError):
        ProducerStateManager.for_mode("java")
    with pytest.raises(ValueError):
        ProducerStateManager.for_mode(max_in_flight=0)
    with pytest.raises(ValueError):
        ProducerStateManager.for_mode(max_in_flight=2**30 + 1)
    with pytest.raises(ValueError):
        ProducerStateManager.for_mode(expiration_ms=0)
    assert ProducerStateManager.for_mode().mode == "lean"
    assert ProducerStateManager.for_mode().max_in_flight == DEFAULT_MAX_IN_FLIGHT


# --- lean mode (the lean producer state proposal) ------------------------------------------------


def test_lean_keeps_only_the_latest_batch():
    part = Partition(ProducerStateManager.for_mode("lean"))
    part.accept(batch(first_seq=0, count=3))
    offsets = part.accept(batch(first_seq=3, count=4))
    entry = part.psm.last_entry(PID)
    assert entry.batch_metadata == (BatchMetadata(3, 6, *offsets),)


def test_lean_exact_duplicate_of_latest_carries_its_offsets():
    part = Partition(ProducerStateManager.for_mode("lean"))
    part.accept(batch(first_seq=0, count=3))
    offsets = part.accept(batch(first_seq=3, count=4))
    result = part.psm.prepare_update(batch(first_seq=3, count=4))
    assert codes(result) == (DUPLICATE_SEQUENCE_NUMBER, offsets)
    assert not result.should_append


def test_lean_exact_duplicate_of_latest_wider_than_the_window():
    part = Partition(ProducerStateManager.for_mode("lean", max_in_flight=2))
    offsets = part.accept(batch(first_seq=0, count=10))
    result = part.psm.prepare_update(batch(first_seq=0, count=10))
    assert codes(result) == (DUPLICATE_SEQUENCE_NUMBER, offsets)


def test_lean_earlier_batch_is_a_duplicate_without_offsets():
    part = Partition(ProducerStateManager.for_mode("lean"))
    part.accept(batch(first_seq=0, count=3))
    part.accept(batch(first_seq=3, count=4))
    assert codes(part.psm.prepare_update(batch(first_seq=0, count=3))) == (DUPLICATE_SEQUENCE_NUMBER, None)
    # Part of the latest batch, or a different split of the same sequences: still already written.
    assert codes(part.psm.prepare_update(batch(first_seq=4, count=2))) == (DUPLICATE_SEQUENCE_NUMBER, None)
    assert codes(part.psm.prepare_update(batch(first_seq=2, count=5))) == (DUPLICATE_SEQUENCE_NUMBER, None)


def test_lean_window_edges():
    # Latest batch 96..100, window of 10 sequence numbers: 91..100.
    part = Partition(ProducerStateManager.for_mode("lean", max_in_flight=10))
    part.accept(batch(first_seq=0, count=96))
    part.accept(batch(first_seq=96, count=5))
    dup = (DUPLICATE_SEQUENCE_NUMBER, None)
    out = (OUT_OF_ORDER_SEQUENCE_NUMBER, None)
    assert codes(part.psm.prepare_update(batch(first_seq=91))) == dup
    assert codes(part.psm.prepare_update(batch(first_seq=91, count=10))) == dup  # 91..100
    assert codes(part.psm.prepare_update(batch(first_seq=100))) == dup
    assert codes(part.psm.prepare_update(batch(first_seq=90))) == out  # 10 below the last: outside
    assert codes(part.psm.prepare_update(batch(first_seq=90, count=3))) == out
    assert codes(part.psm.prepare_update(batch(first_seq=95, count=7))) == out  # 95..101 straddles the end
    assert codes(part.psm.prepare_update(batch(first_seq=100, count=2))) == out
    assert codes(part.psm.prepare_update(batch(first_seq=102))) == out  # a gap
    assert codes(part.psm.prepare_update(batch(first_seq=0))) == out


def test_lean_window_across_the_wrap():
    # Latest batch 2147483646, 2147483647, 0, 1, 2; window of 8: 2147483643..2.
    part = Partition(ProducerStateManager.for_mode("lean", max_in_flight=8))
    part.accept(batch(first_seq=MAX_SEQUENCE - 4, count=3))  # 2147483643..645
    offsets = part.accept(batch(first_seq=MAX_SEQUENCE - 1, count=5))
    dup = (DUPLICATE_SEQUENCE_NUMBER, None)
    out = (OUT_OF_ORDER_SEQUENCE_NUMBER, None)
    assert codes(part.psm.prepare_update(batch(first_seq=MAX_SEQUENCE - 1, count=5))) == (
        DUPLICATE_SEQUENCE_NUMBER,
        offsets,
    )
    assert codes(part.psm.prepare_update(batch(first_seq=MAX_SEQUENCE - 4, count=3))) == dup
    assert codes(part.psm.prepare_update(batch(first_seq=MAX_SEQUENCE - 4, count=8))) == dup  # ..643 to 2
    assert codes(part.psm.prepare_update(batch(first_seq=MAX_SEQUENCE - 4, count=9))) == out  # ..643 to 3
    assert codes(part.psm.prepare_update(batch(first_seq=0, count=3))) == dup
    assert codes(part.psm.prepare_update(batch(first_seq=MAX_SEQUENCE - 5))) == out  # 8 below 2
    assert codes(part.psm.prepare_update(batch(first_seq=1, count=3))) == out  # 1..3 straddles the end
    assert codes(part.psm.prepare_update(batch(first_seq=3))) == (NONE, None)
    assert codes(part.psm.prepare_update(batch(first_seq=4))) == out


def test_lean_default_window_covers_five_large_batches():
    # A client with 5 batches of 10,000 records in flight resends all of them after a lost
    # connection: the oldest is 40,000+ sequence numbers below the latest.
    part = Partition(ProducerStateManager.for_mode("lean"))
    sent = [part.accept(batch(first_seq=i * 10_000, count=10_000)) for i in range(5)]
    for i in range(4):
        result = part.psm.prepare_update(batch(first_seq=i * 10_000, count=10_000))
        assert codes(result) == (DUPLICATE_SEQUENCE_NUMBER, None)
    assert codes(part.psm.prepare_update(batch(first_seq=40_000, count=10_000))) == (
        DUPLICATE_SEQUENCE_NUMBER,
        sent[4],
    )
    far = (49_999 - DEFAULT_MAX_IN_FLIGHT) % (MAX_SEQUENCE + 1)
    assert part.psm.prepare_update(batch(first_seq=far)).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert part.psm.prepare_update(batch(first_seq=far + 1)).error_code == DUPLICATE_SEQUENCE_NUMBER


def test_lean_default_window_is_the_seeds_ten_million_and_holds_across_the_wrap():
    """The lean producer state's default, 10,000,000 sequence numbers, with the latest batch straddling the wrap:
    everything up to 10 million below the latest last sequence is a duplicate, one more is out of
    order, and a batch a whole window AHEAD (a conforming producer's furthest in-flight batch
    arriving early) is out of order, never a duplicate."""
    assert DEFAULT_MAX_IN_FLIGHT == 10_000_000
    window = DEFAULT_MAX_IN_FLIGHT
    space = MAX_SEQUENCE + 1
    part = Partition(ProducerStateManager.for_mode("lean"))
    part.accept(batch(first_seq=MAX_SEQUENCE - 2, count=6))  # 2147483645 .. 2
    last = 2
    dup = (DUPLICATE_SEQUENCE_NUMBER, None)
    out = (OUT_OF_ORDER_SEQUENCE_NUMBER, None)
    oldest = (last - window + 1) % space  # 2137483651
    assert codes(part.psm.prepare_update(batch(first_seq=oldest))) == dup
    assert codes(part.psm.prepare_update(batch(first_seq=oldest, count=window))) == dup  # the whole window
    assert codes(part.psm.prepare_update(batch(first_seq=(oldest - 1) % space))) == out
    assert codes(part.psm.prepare_update(batch(first_seq=oldest, count=window + 1))) == out  # runs past 2
    assert codes(part.psm.prepare_update(batch(first_seq=last + 1))) == (NONE, None)
    for ahead in (1, window // 2, window - 1, window):
        assert codes(part.psm.prepare_update(batch(first_seq=(last + 1 + ahead) % space))) == out


def test_lean_duplicate_with_another_epoch_is_not_a_duplicate():
    part = Partition(ProducerStateManager.for_mode("lean"))
    part.accept(batch(epoch=1, first_seq=0, count=3))
    assert part.psm.prepare_update(batch(epoch=0, first_seq=0, count=3)).error_code == INVALID_PRODUCER_EPOCH
    assert part.psm.prepare_update(batch(epoch=2, first_seq=0, count=3)).error_code == NONE


# --- kafka mode ------------------------------------------------------------------------------


def test_kafka_duplicate_of_a_retained_batch_is_answered_none_with_original_offsets():
    part = Partition(ProducerStateManager.for_mode("kafka"))
    sent = [part.accept(batch(first_seq=i * 3, count=3)) for i in range(7)]
    retained = part.psm.last_entry(PID).batch_metadata
    assert [b.first_seq for b in retained] == [6, 9, 12, 15, 18]
    for i in range(2, 7):
        result = part.psm.prepare_update(batch(first_seq=i * 3, count=3))
        assert codes(result) == (NONE, sent[i])
        assert not result.should_append
    # Older than the 5 retained batches: Kafka answers OUT_OF_ORDER_SEQUENCE_NUMBER.
    for i in range(2):
        result = part.psm.prepare_update(batch(first_seq=i * 3, count=3))
        assert codes(result) == (OUT_OF_ORDER_SEQUENCE_NUMBER, None)
    # Same first sequence but another length is no duplicate.
    assert part.psm.prepare_update(batch(first_seq=12, count=2)).error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert part.psm.prepare_update(batch(first_seq=21)).error_code == NONE


def test_kafka_duplicate_needs_the_same_epoch():
    part = Partition(ProducerStateManager.for_mode("kafka"))
    part.accept(batch(epoch=1, first_seq=0, count=2))
    assert part.psm.prepare_update(batch(epoch=0, first_seq=0, count=2)).error_code == INVALID_PRODUCER_EPOCH
    assert codes(part.psm.prepare_update(batch(epoch=2, first_seq=0, count=2))) == (NONE, None)
    part.accept(batch(epoch=2, first_seq=0, count=2))
    assert len(part.psm.last_entry(PID).batch_metadata) == 1


def test_kafka_duplicates_are_not_appended():
    part = Partition(ProducerStateManager.for_mode("kafka"))
    part.accept(batch(first_seq=0, count=2))
    end = part.log_end
    assert part.produce(batch(first_seq=0, count=2)).duplicate_of == (0, 1)
    assert part.log_end == end
    assert len(part.psm.last_entry(PID).batch_metadata) == 1


# --- expiry ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_expiry_boundary_and_fresh_start(mode):
    psm = ProducerStateManager.for_mode(mode, expiration_ms=1000)
    psm.update(batch(pid=1, first_seq=0, count=5), now_ms=10_000)
    psm.update(batch(pid=2, first_seq=0), now_ms=10_500)
    assert psm.remove_expired_producers(10_999) == 0
    assert psm.remove_expired_producers(11_000) == 1  # exactly expiration_ms since the last append
    assert 1 not in psm and 2 in psm and psm.producer_id_count == 1
    assert psm.prepare_update(batch(pid=1, epoch=0, first_seq=12345)).error_code == NONE
    psm.update(batch(pid=2, first_seq=1, base_offset=9), now_ms=11_400)  # refreshes pid 2
    assert psm.remove_expired_producers(12_000) == 0
    assert psm.remove_expired_producers(12_400) == 1
    assert psm.producer_id_count == 0


def test_lean_reuses_and_compacts_freed_slots():
    psm = ProducerStateManager.for_mode("lean", expiration_ms=100)
    for pid in range(3000):
        now_ms = 0 if pid < 2500 else 50
        psm.update(batch(pid=pid, first_seq=pid, count=2, base_offset=pid * 2), now_ms)
    assert psm.remove_expired_producers(100) == 2500
    assert psm.producer_id_count == 500
    for pid in range(2500, 3000):
        entry = psm.last_entry(pid)
        assert (entry.first_seq, entry.last_seq) == (pid, pid + 1)
        assert (entry.first_data_offset, entry.last_append_ms) == (pid * 2, 50)
    for pid in range(10_000, 10_100):
        psm.update(batch(pid=pid, first_seq=7), now_ms=120)
    assert psm.last_entry(10_050).first_seq == 7 and psm.last_entry(2999).first_seq == 2999
    assert psm.producer_id_count == 600


# --- snapshots -------------------------------------------------------------------------------


def filled(mode: str) -> Partition:
    part = Partition(ProducerStateManager.for_mode(mode))
    part.now_ms = 5_000
    part.accept(batch(pid=1, epoch=0, first_seq=0, count=3))
    part.accept(batch(pid=1, epoch=0, first_seq=3, count=4))
    part.accept(batch(pid=2**62, epoch=7, first_seq=MAX_SEQUENCE, count=2))
    part.now_ms = 6_000
    part.accept(batch(pid=3, epoch=1, first_seq=40))
    return part


@pytest.mark.parametrize("mode", MODES)
def test_snapshot_round_trip(mode, tmp_path):
    part = filled(mode)
    path = part.psm.take_snapshot(tmp_path, part.log_end)
    assert path == tmp_path / f"{part.log_end:020d}.snapshot"
    assert path.name == "00000000000000000010.snapshot"
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind
    fresh = ProducerStateManager.for_mode(mode)
    assert fresh.truncate_and_reload(tmp_path, part.log_end) == part.log_end
    assert fresh.producer_id_count == 3
    for pid in (1, 2**62, 3):
        original = part.psm.last_entry(pid)
        loaded = fresh.last_entry(pid)
        # A snapshot holds the latest batch only, in both modes (Kafka writes it that way too).
        assert loaded.batch_metadata == original.batch_metadata[-1:]
        assert (loaded.producer_epoch, loaded.last_append_ms) == (original.producer_epoch, original.last_append_ms)
    assert fresh.prepare_update(batch(pid=1, first_seq=7)).error_code == NONE
    assert fresh.prepare_update(batch(pid=2**62, epoch=7, first_seq=1)).error_code == NONE


@pytest.mark.parametrize("mode", MODES)
def test_snapshot_file_matches_the_construct_schema(mode, tmp_path):
    part = filled(mode)
    path = part.psm.take_snapshot(tmp_path, 42)
    parsed = PRODUCER_SNAPSHOT.parse(path.read_bytes())
    assert parsed.version == 1
    rows = {e.producer_id: e for e in parsed.entries}
    assert set(rows) == {1, 2**62, 3}
    one = rows[1]
    assert (one.epoch, one.last_sequence, one.last_offset, one.offset_delta) == (0, 6, 6, 3)
    assert (one.timestamp, one.coordinator_epoch, one.current_txn_first_offset) == (5_000, -1, -1)
    wrapped = rows[2**62]
    assert (wrapped.last_sequence, wrapped.offset_delta, wrapped.last_offset) == (0, 1, 8)


@pytest.mark.parametrize("mode", MODES)
def test_empty_snapshot(mode, tmp_path):
    ProducerStateManager.for_mode(mode).take_snapshot(tmp_path, 0)
    assert (tmp_path / f"{0:020d}.snapshot").stat().st_size == 10
    fresh = ProducerStateManager.for_mode(mode)
    assert fresh.truncate_and_reload(tmp_path, 0) == 0 and fresh.producer_id_count == 0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("position", [0, 1, 2, 5, 6, 9, 10, 30, -1])
def test_corrupt_snapshot_is_logged_deleted_and_the_older_one_used(
    mode, position, tmp_path, caplog
):
    part = filled(mode)
    part.psm.take_snapshot(tmp_path, 4)
    part.accept(batch(pid=1, first_seq=7))
    newest = part.psm.take_snapshot(tmp_path, part.log_end)
    data = bytearray(newest.read_bytes())
    data[position] ^= 0x40
    newest.write_bytes(bytes(data))
    fresh = ProducerStateManager.for_mode(mode)
    with caplog.at_level(logging.WARNING, logger="minibroker.storage.producer_state"):
        assert fresh.truncate_and_reload(tmp_path, part.log_end) == 4
    assert any("corrupt" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    assert not newest.exists()
    assert fresh.last_entry(1).last_seq == 6  # the state of the older snapshot, not the corrupt one


@pytest.mark.parametrize("mode", MODES)
def test_truncated_snapshot_is_never_trusted(mode, tmp_path, caplog):
    part = filled(mode)
    path = part.psm.take_snapshot(tmp_path, 10)
    data = path.read_bytes()
    for cut in [0, 3, 9, 10, 11, len(data) - 46, len(data) - 1]:
        path.write_bytes(data[:cut])
        fresh = ProducerStateManager.for_mode(mode)
        fresh.update(batch(pid=99), now_ms=0)  # loading replaces whatever was there
        with caplog.at_level(logging.WARNING, logger="minibroker.storage.producer_state"):
            assert fresh.truncate_and_reload(tmp_path, 10) == 0
        assert fresh.producer_id_count == 0
        assert not path.exists()
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 7


def test_snapshot_with_valid_crc_but_impossible_values_is_rejected(tmp_path, caplog):
    from crc32c import crc32c

    from minibroker.storage.producer_state import PRODUCER_SNAPSHOT_ENTRY

    def write(entries, version=1):
        rows = b"".join(PRODUCER_SNAPSHOT_ENTRY.build(e) for e in entries)
        body = len(entries).to_bytes(4, "big") + rows
        data = version.to_bytes(2, "big") + crc32c(body).to_bytes(4, "big") + body
        snapshot_path(tmp_path, 5).write_bytes(data)

    good = dict(
        producer_id=1, epoch=0, last_sequence=4, last_offset=4, offset_delta=4, timestamp=0,
        coordinator_epoch=-1, current_txn_first_offset=-1,
    )
    write([good])
    psm = ProducerStateManager.for_mode()
    assert psm.truncate_and_reload(tmp_path, 5) == 5 and psm.last_entry(1).first_seq == 0
    bad_entries = [
        [dict(good, producer_id=-3)],
        [dict(good, last_sequence=-1)],
        [dict(good, offset_delta=-1)],
        [dict(good, last_offset=2)],
        [good, good],  # the same producer twice
    ]
    for entries in bad_entries:
        write(entries)
        with caplog.at_level(logging.WARNING, logger="minibroker.storage.producer_state"):
            assert psm.truncate_and_reload(tmp_path, 5) == 0
    write([good], version=2)
    assert psm.truncate_and_reload(tmp_path, 5) == 0
    assert len([r for r in caplog.records if "corrupt" in r.getMessage()]) == 6


@pytest.mark.parametrize("mode", MODES)
def test_snapshots_above_the_log_end_are_deleted(mode, tmp_path):
    part = filled(mode)
    part.psm.take_snapshot(tmp_path, 3)
    part.psm.take_snapshot(tmp_path, 10)
    part.psm.take_snapshot(tmp_path, 11)
    fresh = ProducerStateManager.for_mode(mode)
    assert fresh.truncate_and_reload(tmp_path, 10) == 10
    assert [offset for offset, _ in list_snapshots(tmp_path)] == [3, 10]
    assert fresh.truncate_and_reload(tmp_path, 9) == 3
    assert [offset for offset, _ in list_snapshots(tmp_path)] == [3]


def test_truncate_and_reload_without_snapshots(tmp_path):
    psm = ProducerStateManager.for_mode()
    assert psm.truncate_and_reload(tmp_path / "missing", 100) == 0
    assert psm.truncate_and_reload(tmp_path, 100) == 0


def test_stale_temporary_files_are_removed(tmp_path):
    stale = tmp_path / "00000000000000000007.snapshot.tmp"
    stale.write_bytes(b"half a snapshot")
    psm = ProducerStateManager.for_mode()
    assert psm.truncate_and_reload(tmp_path, 100) == 0
    assert not stale.exists()


def test_unrelated_files_are_left_alone(tmp_path):
    other = tmp_path / "00000000000000000000.log"
    other.write_bytes(b"x")
    (tmp_path / "7.snapshot").write_bytes(b"x")  # not a 20-digit name: not ours
    psm = ProducerStateManager.for_mode()
    assert psm.truncate_and_reload(tmp_path, 100) == 0
    assert other.exists() and (tmp_path / "7.snapshot").exists()


def test_delete_snapshots_before_keeps_the_newest(tmp_path):
    psm = filled("lean").psm
    for offset in (1, 5, 9, 20):
        psm.take_snapshot(tmp_path, offset)
    assert psm.delete_snapshots_before(tmp_path, 9) == 2
    assert [o for o, _ in list_snapshots(tmp_path)] == [9, 20]
    assert psm.delete_snapshots_before(tmp_path, 100) == 0  # the two newest always stay
    assert psm.delete_snapshots_before(tmp_path, 100, keep=1) == 1
    assert [o for o, _ in list_snapshots(tmp_path)] == [20]


@pytest.mark.parametrize("mode", MODES)
def test_recovery_replays_the_log_after_the_snapshot(mode, tmp_path):
    part = filled(mode)
    snapshot_offset = part.log_end
    part.psm.take_snapshot(tmp_path, snapshot_offset)
    replay = []
    for seq in (7, 8, 9):
        base = part.log_end
        part.accept(batch(pid=1, first_seq=seq))
        replay.append(batch(pid=1, first_seq=seq, base_offset=base))
    fresh = ProducerStateManager.for_mode(mode)
    assert fresh.truncate_and_reload(tmp_path, part.log_end) == snapshot_offset
    for header in replay:
        fresh.update(header, now_ms=6_000)
    assert fresh.last_entry(1).last_seq == 9 and fresh.last_entry(1).last_data_offset == part.log_end - 1
    assert fresh.prepare_update(batch(pid=1, first_seq=10)).error_code == NONE


def test_memory_bytes_grows_with_entries_and_kafka_mode_holds_five_batches():
    """memory_bytes walks the state: 1000 producer ids cost at least their packed 26-byte records in
    lean mode, and kafka mode, holding 5 batches each, several times what lean mode holds."""
    sizes = {}
    for mode in ("lean", "kafka"):
        psm = ProducerStateManager.for_mode(mode)
        empty = psm.memory_bytes()
        for pid in range(10**6, 10**6 + 1000):
            for k in range(5):
                psm.update(batch(pid=pid, first_seq=k * 10, count=10, base_offset=k * 10), 1_700_000_000_000)
        sizes[mode] = psm.memory_bytes() - empty
    assert sizes["lean"] >= 1000 * 26
    assert sizes["kafka"] > 5 * sizes["lean"]


def test_a_header_at_the_logs_offset_keeps_every_other_field():
    """BatchHeader.at_offset (what producer state records after an append) is
    dataclasses.replace(header, base_offset=...): a distinct value in each field, all kept."""
    import dataclasses

    header = BatchHeader(*range(100, 100 + len(dataclasses.fields(BatchHeader))))
    moved = header.at_offset(7)
    assert moved == dataclasses.replace(header, base_offset=7)
    assert moved is not header and header.base_offset == 101
