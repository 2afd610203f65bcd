"""A reference idempotent producer for the lean producer state proposal (its producer side, phase 2).

`producer.core.ProducerCore` is the protocol logic, sans-I/O (bytes and time in, bytes out);
`producer.client.IdempotentProducer` drives it over a socket. It reads the broker's duplicate window
from ApiVersions / InitProducerId (tagged field 19778, minibroker.protocol.extensions), keeps many batches in
flight, treats DUPLICATE_SEQUENCE_NUMBER as delivered, resends on OUT_OF_ORDER_SEQUENCE_NUMBER and
holds a partition's next batch back while its unresolved sequence numbers would pass the window.
It depends on `protocol` only. See `minibroker.producer.core` for the rules, scripts/bench_lean_producer for
the proposal's claim measured.
"""

from typing import Any

from minibroker.producer.core import Delivery, ProducerCore, ProducerError, ProducerStats

__all__ = ["Delivery", "IdempotentProducer", "ProducerCore", "ProducerError", "ProducerStats"]


def __getattr__(name: str) -> Any:
    # The socket driver is imported on first use, so `import minibroker.producer.core` stays free of I/O.
    if name == "IdempotentProducer":
        from minibroker.producer.client import IdempotentProducer

        return IdempotentProducer
    raise AttributeError(f"module 'producer' has no attribute {name!r}")
