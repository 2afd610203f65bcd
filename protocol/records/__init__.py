"""Record batches (v2, Kafka's DefaultRecordBatch), by responsibility:

* `protocol.records.batch`: the layout, the one place its byte offsets are written (the 61-byte
  header, attributes bits, reading headers, assigning offsets, stamping LogAppendTime);
* `protocol.records.validation`: what a produced batch must pass before it is stored (Kafka's
  LogValidator checks), and the errors it answers;
* `protocol.records.codec`: records the broker writes and reads itself (internal topics, tools,
  ListOffsets by timestamp);
* `protocol.records.varint`: Kafka's varints, one reader and one writer.

The names most callers need are importable from `protocol.records` itself.
"""

from protocol.records.batch import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    ATTRIBUTES_AT,
    BATCH_HEADER,
    CRC_AT,
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_AT,
    MIN_BATCH_LENGTH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    OFFSET_AND_LENGTH,
    BatchHeader,
    iter_headers,
    read_header,
    set_base_offset,
    stamp_log_append_time,
)
from protocol.records.codec import decode_records, encode_batch, record_timestamps
from protocol.records.validation import (
    MAX_COMPRESSION_RATIO,
    CorruptRecordError,
    InvalidRecordError,
    RecordsTooLargeError,
    UnsupportedCompressionError,
    check_batch,
    check_produce_records,
    check_records,
)
from protocol.records.varint import read_uvarint, read_varint, write_uvarint, write_varint

__all__ = [
    "ATTRIBUTES_AT",
    "ATTR_COMPRESSION_MASK",
    "ATTR_CONTROL",
    "ATTR_TIMESTAMP_TYPE",
    "ATTR_TRANSACTIONAL",
    "BATCH_HEADER",
    "CRC_AT",
    "CRC_START",
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "MAGIC_OFFSET",
    "MAX_COMPRESSION_RATIO",
    "MAX_TIMESTAMP_AT",
    "MIN_BATCH_LENGTH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "OFFSET_AND_LENGTH",
    "BatchHeader",
    "CorruptRecordError",
    "InvalidRecordError",
    "RecordsTooLargeError",
    "UnsupportedCompressionError",
    "check_batch",
    "check_produce_records",
    "check_records",
    "decode_records",
    "encode_batch",
    "iter_headers",
    "read_header",
    "read_uvarint",
    "read_varint",
    "record_timestamps",
    "set_base_offset",
    "stamp_log_append_time",
    "write_uvarint",
    "write_varint",
]
