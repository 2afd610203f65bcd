"""A partition's leader-epoch cache: the offset at which each leader epoch began (Kafka's
LeaderEpochFileCache, KIP-101), kept in the partition directory as `leader-epoch-checkpoint`.

Kafka's file format, text:

    0            the version
    2            the number of entries
    0 0          epoch, start offset
    3 1200

An entry is added when a leader appends the first batch of a newer epoch (`assign`), or a follower
replicates one (the epoch of each batch it appends); entries at or past a truncation point go with
it (`truncate_from_end`), and the first one moves up when the log start does (`truncate_from_start`).
`end_offset_for(epoch)` answers OffsetForLeaderEpoch: the largest epoch at most the one asked for,
and where it ended (the start of the next epoch, or the log end for the latest one), which is where a
follower of an older leader truncates to.

The file is written on every change (a temporary file renamed over it, without an fsync: Kafka
writes it without one on its hot path too). A missing file (a log of an earlier version) is an empty
cache, and so is an unreadable one (logged): the leader's next append starts its epoch at the log
end, as Kafka's cache starts empty for a log without the file.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from pathlib import Path
from minibroker.storage.files import TMP_SUFFIX

__all__ = ["LEADER_EPOCH_FILE", "UNDEFINED_EPOCH", "UNDEFINED_OFFSET", "LeaderEpochCache"]

log = logging.getLogger(__name__)

LEADER_EPOCH_FILE = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1  # Kafka's RecordBatch.NO_PARTITION_LEADER_EPOCH / UNDEFINED_EPOCH
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, directory: Path, entries: list[tuple[int, int]] | None = None) -> None:
        self.path = Path(directory) / LEADER_EPOCH_FILE
        self.entries: list[tuple[int, int]] = entries if entries is not None else []

    @classmethod
    def load(cls, directory: Path) -> LeaderEpochCache:
        """The cache the file holds (empty when there is none, or it cannot be read)."""
        path = Path(directory) / LEADER_EPOCH_FILE
        try:
            lines = path.read_text().split("\n")
            if lines[0].strip() != "0":
                raise ValueError(f"version {lines[0]!r}")
            count = int(lines[1])
            entries = []
            for line in lines[2:2 + count]:
                epoch, offset = (int(part) for part in line.split())
                entries.append((epoch, offset))
            if len(entries) != count or any(a[0] >= b[0] or a[1] > b[1] for a, b in zip(entries, entries[1:])):
                raise ValueError("entries missing or out of order")
        except FileNotFoundError:
            return cls(directory)
        except (OSError, ValueError, IndexError, UnicodeDecodeError) as exc:
            log.warning("%s is unreadable (%s): the leader epochs start afresh at the log end", path, exc)
            return cls(directory)
        return cls(directory, entries)

    # -- reading ------------------------------------------------------------------------------------

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def epoch_at(self, offset: int) -> int:
        """The epoch the record at `offset` was written in (UNDEFINED_EPOCH before the first)."""
        index = bisect_right([start for _, start in self.entries], offset) - 1
        return self.entries[index][0] if index >= 0 else UNDEFINED_EPOCH

    def end_offset_for(self, requested: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch (Kafka's LeaderEpochFileCache.endOffsetFor):
        the latest epoch and the log end when `requested` is the latest; the largest epoch below
        `requested` and the start of the first epoch after it otherwise; (UNDEFINED_EPOCH,
        UNDEFINED_OFFSET) when `requested` is older or newer than every epoch, or there is none."""
        if requested == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if requested == self.latest_epoch:
            return requested, log_end_offset
        epochs = [epoch for epoch, _ in self.entries]
        higher = bisect_right(epochs, requested)
        if higher == 0:  # older than the first epoch we know
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if higher == len(self.entries):  # newer than every epoch known: undefined, as Kafka answers
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        return self.entries[higher - 1][0], self.entries[higher][1]

    # -- changing -------------------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Epoch `epoch` starts at `start_offset` (an older or equal epoch changes nothing)."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return False
        # An entry at or past the new start offset was for records since truncated away.
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        self.write()
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was truncated to `end_offset`: epochs that began at or after it go."""
        kept = [entry for entry in self.entries if entry[1] < end_offset]
        if kept != self.entries:
            self.entries = kept
            self.write()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: the epoch holding it starts there."""
        index = bisect_right([start for _, start in self.entries], start_offset) - 1
        if index < 0:
            return
        kept = [(self.entries[index][0], max(self.entries[index][1], start_offset))] + self.entries[index + 1:]
        if kept != self.entries:
            self.entries = kept
            self.write()

    def write(self) -> None:
        text = "0\n%d\n%s" % (len(self.entries), "".join(f"{e} {o}\n" for e, o in self.entries))
        tmp = self.path.with_name(self.path.name + TMP_SUFFIX)
        with open(tmp, "w") as out:
            out.write(text)
        os.replace(tmp, self.path)
