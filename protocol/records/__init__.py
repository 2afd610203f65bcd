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

from protocol.records import batch, codec, validation, varint
from protocol.records.batch import *  # noqa: F403
from protocol.records.codec import *  # noqa: F403
from protocol.records.validation import *  # noqa: F403
from protocol.records.varint import *  # noqa: F403

__all__ = [*batch.__all__, *codec.__all__, *validation.__all__, *varint.__all__]
