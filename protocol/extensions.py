"""minibroker's additions to Kafka's wire protocol: tagged fields that existing clients skip.

KIP-482 tagged fields let a flexible message carry fields a reader does not know: every reader skips
an unknown tag by its length (Java keeps it in `_unknownTaggedFields`, librdkafka skips it,
kafka-python keeps it in `unknown_tags`), so an addition here costs existing clients nothing. Only
flexible versions have tagged sections; older versions carry none of this.

MAX_IN_FLIGHT_SEQUENCE_TAG (19778): the lean producer state proposal's duplicate window
-----------------------------------------------------------------------------------------
The lean producer state proposal: "Producer need keep a same value of
max.in.flight.sequence.number.per.connection decided by broker. When producer starts up, it sends
API request to broker. Broker will piggyback the value of max.in.flight.sequence.number.per.connection
on API response to producer." The broker therefore adds, to the top-level tagged section of

- every ApiVersions response from v3 (the first request any client sends), and
- every InitProducerId response from v2 (the first request an idempotent producer sends),

one tagged field: tag 19778, an INT32, the broker's `max.in.flight.sequence.number.per.connection`
in sequence numbers (default 10,000,000). Only in `lean` producer-state mode: in `kafka` mode the
broker keeps Kafka's 5 batches and the field is absent, which tells a lean-producer-state producer to keep to
Kafka's 5 in-flight batches (the proposal's "mechanism ... to tell whether a broker supports the new
duplicate detection logic").

Why 19778: Kafka numbers the tagged fields of each message from 0 upward and has used only single
digits so far (ApiVersionsResponse: 0-3; InitProducerIdResponse: none), so a number far above them
will not be taken by a later Kafka version before this extension is long retired; 19778 is 0x4D42,
"MB" in ASCII, so it is recognisable in a hex dump. It costs 3 bytes as an unsigned varint.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Final

__all__ = [
    "MAX_IN_FLIGHT_SEQUENCE_TAG",
    "MAX_IN_FLIGHT_SEQUENCE_APIS",
    "max_in_flight_sequence_field",
    "read_max_in_flight_sequence",
]

MAX_IN_FLIGHT_SEQUENCE_TAG: Final = 19778

# api key -> first (flexible) response version that carries the field.
MAX_IN_FLIGHT_SEQUENCE_APIS: Final[dict[int, int]] = {
    18: 3,  # ApiVersions
    22: 2,  # InitProducerId
}

_INT32 = struct.Struct(">i")


def max_in_flight_sequence_field(window: int) -> dict[int, bytes]:
    """The raw tagged field announcing `window`, for `minibroker.protocol.messages.encode_response`."""
    return {MAX_IN_FLIGHT_SEQUENCE_TAG: _INT32.pack(window)}


def read_max_in_flight_sequence(unknown_tags: Mapping[int, bytes]) -> int | None:
    """The window a broker announced, from a response's unknown tagged fields
    (`minibroker.protocol.messages.decode_response_tags`); None when the broker sent none."""
    raw = unknown_tags.get(MAX_IN_FLIGHT_SEQUENCE_TAG)
    if raw is None:
        return None
    if len(raw) != _INT32.size:
        raise ValueError(f"tagged field {MAX_IN_FLIGHT_SEQUENCE_TAG} holds {len(raw)} bytes, not an INT32")
    (window,) = _INT32.unpack(raw)
    if window < 1:
        raise ValueError(f"tagged field {MAX_IN_FLIGHT_SEQUENCE_TAG} announces a window of {window}")
    return window
