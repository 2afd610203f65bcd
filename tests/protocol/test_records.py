"""Record batch checks, against batches built by a real client library (kafka-python)."""

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from minibroker.protocol.records import (
    CorruptRecordError,
    InvalidRecordError,
    check_produce_records,
    iter_headers,
    set_base_offset,
)


def client_batch(n=3, producer_id=-1, epoch=-1, sequence=-1, compression=0) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=compression, is_transactional=False,
        producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence, batch_size=1 << 20,
    )
    for i in range(n):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=b"v" * i,
                       headers=[("h", b"x")])
    return bytes(builder.build())


def test_a_client_batch_passes_and_its_header_is_read():
    data = client_batch(5, producer_id=7, epoch=1, sequence=2147483646)
    header = check_produce_records(data)
    assert header.records_count == 5 and header.last_offset_delta == 4
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 1, 2147483646)
    assert header.last_sequence == 2  # 2147483646, 2147483647, 0, 1, 2
    assert header.size == len(data)


def test_crc_mismatch_is_corrupt_message():
    data = bytearray(client_batch())
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC") as info:
        check_produce_records(bytes(data))
    assert info.value.error_code == 2


def test_wrong_magic_is_invalid_record():
    data = bytearray(client_batch())
    data[16] = 1
    with pytest.raises(InvalidRecordError, match="magic") as info:
        check_produce_records(bytes(data))
    assert info.value.error_code == 87


def test_every_truncation_is_corrupt():
    data = client_batch()
    for cut in range(len(data)):
        with pytest.raises(InvalidRecordError):
            check_produce_records(data[:cut])


def test_two_batches_in_one_partition_are_refused():
    with pytest.raises(InvalidRecordError, match="exactly one"):
        check_produce_records(client_batch() + client_batch())


def test_count_must_match_offset_range():
    data = bytearray(client_batch(3))
    data[57:61] = (4).to_bytes(4, "big")  # recordsCount, inside the CRC: recompute it
    from crc32c import crc32c

    data[17:21] = crc32c(bytes(data[21:])).to_bytes(4, "big")
    with pytest.raises(InvalidRecordError, match="record count"):
        check_produce_records(bytes(data))


def test_setting_offsets_keeps_the_crc_valid():
    data = bytearray(client_batch())
    set_base_offset(data, 0, 123456)
    header = check_produce_records(bytes(data))
    assert header.base_offset == 123456 and header.last_offset == 123458


def test_iter_headers_stops_at_a_torn_tail():
    data = client_batch() + client_batch(2)
    whole = list(iter_headers(data))
    assert [h.records_count for h in whole] == [3, 2]
    torn = list(iter_headers(data[:-1]))
    assert [h.records_count for h in torn] == [3]


from hypothesis import given, strategies as st  # noqa: E402

from minibroker.protocol.records import decode_records, encode_batch  # noqa: E402

maybe_bytes = st.one_of(st.none(), st.binary(max_size=200))


@given(st.lists(st.tuples(maybe_bytes, maybe_bytes), min_size=1, max_size=20), st.integers(0, 2**41))
def test_encode_decode_round_trip_and_a_client_reads_it(records, ts):
    data = encode_batch(records, ts, base_offset=100)
    header = check_produce_records(data)
    assert header.records_count == len(records)
    decoded = list(decode_records(data))
    assert [(k, v) for _, _, k, v in decoded] == records
    assert [o for o, *_ in decoded] == list(range(100, 100 + len(records)))
    from kafka.record.default_records import DefaultRecordBatch

    client_view = [(r.key, r.value, r.timestamp) for r in DefaultRecordBatch(data)]
    assert client_view == [(k, v, ts) for k, v in records]
