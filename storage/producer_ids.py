"""Producer-id allocation that never hands out the same id twice, even across a crash.

Kafka's controller (ProducerIdControlManager) hands brokers blocks of 1000 ids and persists the next
block start in the metadata log before a block is used. Here the broker is its own controller: the
end of the current block is written to `<data_dir>/producer-ids` (atomically: tmp file, fsync,
os.replace, directory fsync) before any id of the block is returned. A restart, clean or not, starts
with a fresh block at the recorded end, so at most one block of ids is skipped per restart.

File format: one line of JSON, {"version": 1, "next_block_start": N}. Ids start at 0 on an empty data
directory, as Kafka's first block does.
"""

from __future__ import annotations

import json
from pathlib import Path

from minibroker.storage.errors import DamagedFileError
from minibroker.storage.files import write_atomically

PRODUCER_IDS_FILE = "producer-ids"
DEFAULT_BLOCK_SIZE = 1000
MAX_PRODUCER_ID = 2**63 - 1


class ProducerIdsExhaustedError(Exception):
    """No producer id is left (never in practice)."""


class ProducerIdAllocator:
    """`ProducerIdAllocator(data_dir)` (or `.open(data_dir)`); `next_id()` hands out the ids."""

    def __init__(self, data_dir: Path, block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        if block_size < 1:
            raise ValueError("block_size must be positive")
        data_dir = Path(data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        self.path = data_dir / PRODUCER_IDS_FILE
        self.block_size = block_size
        try:
            state = json.loads(self.path.read_bytes())
            next_block_start = state["next_block_start"]
            if type(next_block_start) is not int or not 0 <= next_block_start <= MAX_PRODUCER_ID:
                raise ValueError(f"next_block_start {next_block_start!r} is not a producer id")
        except FileNotFoundError:
            next_block_start = 0
        except (ValueError, KeyError, TypeError) as exc:
            # Written atomically, so this is damage from outside: reusing ids would be worse
            # than refusing to start.
            raise DamagedFileError(
                self.path, f"unreadable ({exc})",
                'restore it ({"version": 1, "next_block_start": N}, N above every producer id '
                "handed out so far)",
            ) from exc
        self._next_id = next_block_start
        self._block_end = next_block_start  # exclusive; nothing of the new block reserved yet

    @classmethod
    def open(cls, data_dir: Path, block_size: int = DEFAULT_BLOCK_SIZE) -> ProducerIdAllocator:
        return cls(data_dir, block_size)

    def next_id(self) -> int:
        if self._next_id >= self._block_end:
            self._reserve_block()
        producer_id = self._next_id
        self._next_id += 1
        return producer_id

    @property
    def reserved_until(self) -> int:
        """The persisted high-water mark: every id below it may have been handed out."""
        return self._block_end

    def _reserve_block(self) -> None:
        end = self._next_id + self.block_size
        if end > MAX_PRODUCER_ID:
            raise ProducerIdsExhaustedError("producer ids are exhausted")
        data = json.dumps({"version": 1, "next_block_start": end}).encode() + b"\n"
        write_atomically(self.path, data)
        self._block_end = end
