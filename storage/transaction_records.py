"""The records of `__transaction_state`, in Kafka's own layouts (TransactionLogKey v0,
TransactionLogValue v0-1, Kafka's transaction-coordinator module), so Kafka's tools read what this
broker writes (kafka-dump-log --transaction-log-decoder, kafka-console-consumer with the transaction
log formatter).

    key    int16 record type 0 (TRANSACTION_LOG), then TransactionLogKey v0: transactionalId string
    value  int16 version, then TransactionLogValue:
             producerId int64, producerEpoch int16, transactionTimeoutMs int32,
             transactionStatus int8 (the TxnState ids below),
             transactionPartitions nullable [topic string, partitionIds [int32]],
             transactionLastUpdateTimestampMs int64, transactionStartTimestampMs int64
           v1 is flexible (compact strings and arrays, a tagged-field section after each struct)
           and carries tagged fields on the value: 0 previousProducerId int64, 1 nextProducerId
           int64, 2 clientTransactionVersion int16, 3 nextProducerEpoch int16 (each written only
           when not its default: -1, -1, 0, -1)
           null: a tombstone (the transactional id expired)

Kafka writes version 0 until the `transaction.version` feature reaches 2 (KIP-890 part 2), then
version 1 (TransactionVersion.transactionLogValueVersion); so does this broker, and it reads both.
Tags 0-2 carry what transactions version 2 needs across a restart: the producer id before a
rotation (a client's retry may name it), the producer id a prepared transaction hands over once its
epoch is exhausted, and the transaction version of the client that last changed the state. The partitions are null in the
Empty state (Kafka's TransactionLog.valueToBytes); topics and partitions are written sorted (Kafka
groups them through a hash map, in no order a reader may rely on).

Integers are big-endian; a v0 string is an int16 length and UTF-8, a v0 array an int32 count (-1
null); v1's compact forms are an unsigned varint of length + 1 (0: null).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

from minibroker.protocol.messages import ProtocolError, read_tagged_section, write_tagged_section
from minibroker.protocol.records.varint import read_uvarint, write_uvarint

__all__ = [
    "TRANSACTION_LOG_RECORD_TYPE", "TxnState", "TxnRecord", "transaction_key", "transaction_value",
    "parse_transaction_key", "parse_transaction_value",
]

TRANSACTION_LOG_RECORD_TYPE = 0  # Kafka's CoordinatorRecordType.TRANSACTION_LOG
VALUE_VERSION = 0  # what Kafka writes below transaction.version 2
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


class TxnState(enum.IntEnum):
    """Kafka's TransactionState ids (the transactionStatus byte) and names (DescribeTransactions)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))


@dataclass(frozen=True)
class TxnRecord:
    """One TransactionLogValue: a transactional id's state as the coordinator persists it."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    last_update_ms: int = -1
    start_ms: int = -1
    previous_producer_id: int = NO_PRODUCER_ID  # v1 tagged fields; v0 has none of them
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0
    next_producer_epoch: int = NO_PRODUCER_EPOCH


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_FIXED = struct.Struct(">qhib")  # producerId, producerEpoch, transactionTimeoutMs, transactionStatus
_TIMES = struct.Struct(">qq")  # lastUpdate, start


def _string(text: str) -> bytes:
    data = text.encode("utf8")
    if len(data) > 32767:
        raise ValueError("a string of the transaction log holds at most 32767 bytes")
    return _I16.pack(len(data)) + data


def transaction_key(transactional_id: str) -> bytes:
    return _I16.pack(TRANSACTION_LOG_RECORD_TYPE) + _string(transactional_id)


def transaction_value(record: TxnRecord, version: int = VALUE_VERSION) -> bytes:
    """TransactionLogValue of `version` (0, as Kafka writes it here, or 1)."""
    if record.state is TxnState.EMPTY and record.partitions:
        raise ValueError("a transaction in the Empty state has no partitions")
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(record.partitions):
        by_topic.setdefault(topic, []).append(partition)
    out = bytearray(_I16.pack(version))
    out += _FIXED.pack(record.producer_id, record.producer_epoch, record.timeout_ms, int(record.state))
    null = record.state is TxnState.EMPTY
    if version == 0:
        out += _I32.pack(-1 if null else len(by_topic))
        for topic, partitions in by_topic.items():
            out += _string(topic) + _I32.pack(len(partitions))
            out += b"".join(_I32.pack(p) for p in partitions)
    elif version == 1:
        write_uvarint(0 if null else len(by_topic) + 1, out)
        for topic, partitions in by_topic.items():
            data = topic.encode("utf8")
            write_uvarint(len(data) + 1, out)
            out += data
            write_uvarint(len(partitions) + 1, out)
            out += b"".join(_I32.pack(p) for p in partitions)
            write_uvarint(0, out)  # the topic entry's tagged fields
    else:
        raise ValueError(f"TransactionLogValue version {version} is not one this broker writes")
    out += _TIMES.pack(record.last_update_ms, record.start_ms)
    if version >= 1:
        tags = [(tag, data) for tag, data, default in (
            (0, _I64.pack(record.previous_producer_id), record.previous_producer_id == NO_PRODUCER_ID),
            (1, _I64.pack(record.next_producer_id), record.next_producer_id == NO_PRODUCER_ID),
            (2, _I16.pack(record.client_transaction_version), record.client_transaction_version == 0),
            (3, _I16.pack(record.next_producer_epoch), record.next_producer_epoch == NO_PRODUCER_EPOCH),
        ) if not default]
        write_tagged_section(tags, out)
    return bytes(out)


class _Reader:
    """Reads one value, every length checked against the bytes there (ValueError past the end)."""

    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"a field of {n} byte(s) at {self.pos} runs past the end ({len(self.data)} bytes)")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt: struct.Struct) -> tuple:
        return fmt.unpack(self.take(fmt.size))

    def uvarint(self) -> int:
        value, self.pos = read_uvarint(self.data, self.pos)
        return value

    def string(self) -> str:
        (length,) = self.unpack(_I16)
        return bytes(self.take(length)).decode("utf8")

    def compact_string(self) -> str:
        length = self.uvarint() - 1
        if length < 0:
            raise ValueError("a topic name is null")
        return bytes(self.take(length)).decode("utf8")

    def skip_tags(self) -> dict[int, bytes]:
        try:
            fields, self.pos = read_tagged_section(bytes(self.data), self.pos)
        except ProtocolError as exc:
            raise ValueError(str(exc)) from None
        return dict(fields)

    def done(self) -> None:
        if self.pos != len(self.data):
            raise ValueError(f"{len(self.data) - self.pos} byte(s) after the value")


def parse_transaction_key(key: bytes) -> str:
    """The transactional id of a key; ValueError for a record type other than the transaction log's."""
    reader = _Reader(key)
    (record_type,) = reader.unpack(_I16)
    if record_type != TRANSACTION_LOG_RECORD_TYPE:
        raise ValueError(f"key of record type {record_type} is not a transaction log key")
    transactional_id = reader.string()
    reader.done()
    return transactional_id


def parse_transaction_value(value: bytes) -> TxnRecord:
    """TransactionLogValue v0 or v1; ValueError for anything else."""
    reader = _Reader(value)
    (version,) = reader.unpack(_I16)
    if version not in (0, 1):
        raise ValueError(f"TransactionLogValue version {version} is not readable here (versions 0-1 are)")
    producer_id, epoch, timeout_ms, status = reader.unpack(_FIXED)
    try:
        state = TxnState(status)
    except ValueError:
        raise ValueError(f"unknown transaction state {status}") from None
    partitions: set[tuple[str, int]] = set()
    count = reader.unpack(_I32)[0] if version == 0 else reader.uvarint() - 1
    for _ in range(max(count, 0)):
        topic = reader.string() if version == 0 else reader.compact_string()
        n = reader.unpack(_I32)[0] if version == 0 else reader.uvarint() - 1
        for _ in range(max(n, 0)):
            partitions.add((topic, reader.unpack(_I32)[0]))
        if version >= 1:
            reader.skip_tags()
    last_update_ms, start_ms = reader.unpack(_TIMES)
    tagged: dict[int, bytes] = reader.skip_tags() if version >= 1 else {}
    reader.done()

    def tag(number: int, fmt: struct.Struct, default: int) -> int:
        data = tagged.get(number)
        if data is None:
            return default
        if len(data) != fmt.size:
            raise ValueError(f"tagged field {number} has {len(data)} byte(s), not {fmt.size}")
        return fmt.unpack(data)[0]

    return TxnRecord(
        producer_id, epoch, timeout_ms, state,
        frozenset() if state is TxnState.EMPTY else frozenset(partitions),
        last_update_ms, start_ms,
        previous_producer_id=tag(0, _I64, NO_PRODUCER_ID),
        next_producer_id=tag(1, _I64, NO_PRODUCER_ID),
        client_transaction_version=tag(2, _I16, 0),
        next_producer_epoch=tag(3, _I16, NO_PRODUCER_EPOCH),
    )
