"""Producer-id allocation that never hands out the same id twice, even across a crash.

Kafka's controller (ProducerIdControlManager) hands brokers blocks of 1000 ids and records the next
block start in the metadata log (a ProducerIdsRecord) before a block is used. So here: a broker's
`ProducerIdAllocator` asks the controller for a block (`reserve_block`, which commits the record,
durable before it returns) and hands its ids out; a restart, clean or not, asks for a fresh block,
so at most one block of ids per broker is skipped per restart, and two brokers never share one.

Data directories written before the metadata log kept the next block start in a file of its own,
`<data_dir>/producer-ids` ({"version": 1, "next_block_start": N}); `read_legacy_file` reads it once,
into the metadata log (minibroker.metadata_migration). Ids start at 0 on an empty cluster, as
Kafka's first block does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from minibroker.storage.errors import DamagedFileError

PRODUCER_IDS_FILE = "producer-ids"
DEFAULT_BLOCK_SIZE = 1000
MAX_PRODUCER_ID = 2**63 - 1


class ProducerIdsExhaustedError(Exception):
    """No producer id is left (never in practice)."""


class ProducerIdAllocator:
    """`ProducerIdAllocator(reserve_block)`; `next_id()` hands out the ids. `reserve_block(size)`
    returns the first id of a new block of `size` ids, recorded before it returns."""

    def __init__(self, reserve_block: Callable[[int], int], block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        if block_size < 1:
            raise ValueError("block_size must be positive")
        self._reserve = reserve_block
        self.block_size = block_size
        self._next_id = 0
        self._block_end = 0  # exclusive; nothing reserved yet

    def next_id(self) -> int:
        if self._next_id >= self._block_end:
            start = self._reserve(self.block_size)
            self._next_id, self._block_end = start, start + self.block_size
        producer_id = self._next_id
        self._next_id += 1
        return producer_id

    @property
    def reserved_until(self) -> int:
        """The end of this allocator's block: every id below it may have been handed out."""
        return self._block_end


def read_legacy_file(data_dir: Path) -> int | None:
    """The next block start an earlier version's `producer-ids` file holds (None: no file).
    DamagedFileError naming it when it cannot be read: reusing ids would be worse than refusing to
    start."""
    path = Path(data_dir) / PRODUCER_IDS_FILE
    try:
        state = json.loads(path.read_bytes())
        next_block_start = state["next_block_start"]
        if type(next_block_start) is not int or not 0 <= next_block_start <= MAX_PRODUCER_ID:
            raise ValueError(f"next_block_start {next_block_start!r} is not a producer id")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DamagedFileError(
            path, f"unreadable ({exc})",
            'restore it ({"version": 1, "next_block_start": N}, N above every producer id '
            "handed out so far)",
        ) from exc
    return next_block_start
