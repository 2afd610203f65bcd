"""Record batches (v2, Kafka's DefaultRecordBatch), by responsibility:

* `minibroker.protocol.records.batch`: the layout, the one place its byte offsets are written (the 61-byte
  header, attributes bits, reading headers, assigning offsets, stamping LogAppendTime);
* `minibroker.protocol.records.validation`: what a produced batch must pass before it is stored (Kafka's
  LogValidator checks), and the errors it answers;
* `minibroker.protocol.records.codec`: records the broker writes and reads itself (internal topics, tools,
  ListOffsets by timestamp);
* `minibroker.protocol.records.varint`: Kafka's varints, one reader and one writer.

The names most callers need are importable from `minibroker.protocol.records` itself.
"""

from minibroker.protocol.records import batch, codec, validation, varint
from minibroker.protocol.records.batch import *  # noqa: F403
from minibroker.protocol.records.codec import *  # noqa: F403
from minibroker.protocol.records.validation import *  # noqa: F403
from minibroker.protocol.records.varint import *  # noqa: F403

__all__ = [*batch.__all__, *codec.__all__, *validation.__all__, *varint.__all__]
