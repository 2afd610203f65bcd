"""Per-partition idempotent-producer state: which batches a producer id may append; its snapshots.

Two implementations of one interface, chosen by `producer.state.mode`
(`ProducerStateManager.for_mode`):

    manager.py   ProducerStateManager (the interface, validation's common part, snapshot loading),
                 ProducerAppendInfo (what validating a batch decided), ProducerStateEntry,
                 BatchMetadata; where transactions (KIP-98) will fit
    lean.py      LeanProducerStateManager: the lean producer state proposal, the latest batch per producer id
                 in 26 bytes, duplicates by a window of sequence numbers
    kafka.py     KafkaProducerStateManager: Apache Kafka's five retained batches per producer id
    snapshot.py  Kafka's producer snapshot file (version 1), shared by both

Pure: no clock, no trio; I/O only for the snapshot files.
"""

from minibroker.storage.producer_state.kafka import KAFKA_BATCHES_TO_RETAIN, KafkaProducerStateManager
from minibroker.storage.producer_state.lean import LeanProducerStateManager
from minibroker.storage.producer_state.manager import (
    DEFAULT_EXPIRATION_MS,
    DEFAULT_MAX_IN_FLIGHT,
    MAX_SEQUENCE,
    BatchMetadata,
    ProducerAppendInfo,
    ProducerStateEntry,
    ProducerStateManager,
)
from minibroker.storage.producer_state.snapshot import (
    PRODUCER_SNAPSHOT,
    PRODUCER_SNAPSHOT_ENTRY,
    PRODUCER_SNAPSHOT_HEADER,
    SEQUENCE_SPACE,
    SNAPSHOT_VERSION,
    SNAPSHOTS_TO_KEEP,
    list_snapshots,
    snapshot_path,
)

MODES = (LeanProducerStateManager.mode, KafkaProducerStateManager.mode)

__all__ = [
    "DEFAULT_EXPIRATION_MS",
    "DEFAULT_MAX_IN_FLIGHT",
    "KAFKA_BATCHES_TO_RETAIN",
    "MAX_SEQUENCE",
    "MODES",
    "PRODUCER_SNAPSHOT",
    "PRODUCER_SNAPSHOT_ENTRY",
    "PRODUCER_SNAPSHOT_HEADER",
    "SEQUENCE_SPACE",
    "SNAPSHOTS_TO_KEEP",
    "SNAPSHOT_VERSION",
    "BatchMetadata",
    "KafkaProducerStateManager",
    "LeanProducerStateManager",
    "ProducerAppendInfo",
    "ProducerStateEntry",
    "ProducerStateManager",
    "list_snapshots",
    "snapshot_path",
]
