"""Loading a partition log's segments from disk, recovering what a crash tore (Kafka's LogLoader).

What is trusted depends on the clean-shutdown marker (minibroker.storage.log_dir), which a clean close writes
and the first change to the log's files after a load removes:

* With the marker, loading trusts the indexes and checks only the active segment's tail (the batches
  after its last offset-index entry, and the CRC of its last batch), so loading is fast whatever the
  log's size; a tail that does not check out is recovered as below.
* Without it, the active segment is scanned batch by batch, checking framing, magic, offset
  continuity and CRC, truncated at the first torn or corrupt batch (the cut fsynced before anything
  is appended after it), and its indexes are rebuilt.

Older segments were fsynced when they were rolled, so they are never scanned: a missing or badly
sized index file of any segment is rebuilt from its log, and a corrupt one when first used
(minibroker.storage.segment). Nothing is deleted on a guess.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

from minibroker.storage.config import LogConfig
from minibroker.storage.file_cache import FileCache
from minibroker.storage.segment import LogSegment

__all__ = ["load_segments"]

logger = logging.getLogger(__name__)


def load_segments(directory: Path, bases: list[int], config: LogConfig, files: FileCache, *, clean: bool,
                  begin_write: Callable[[], None], loaded_ms: int, start_offset: int) -> list[LogSegment]:
    """The segments whose base offsets `bases` lists (sorted), loaded; an empty log's first segment
    (at `start_offset`) when there are none. `clean`: the clean-shutdown marker was there.
    `begin_write` runs before the first change to the files (it removes the marker). `loaded_ms`
    starts the active segment's age (segment.ms), as Kafka resets a loaded segment's. On an error
    every segment opened is closed again."""
    interval, index_size = config.index_interval_bytes, config.segment_index_bytes
    segments: list[LogSegment] = []
    try:
        if not bases:
            begin_write()
            segments.append(LogSegment.create(directory, start_offset, index_interval_bytes=interval,
                                              max_index_size=index_size, files=files))
            return segments
        segments.extend(LogSegment.open(directory, base, index_interval_bytes=interval, max_index_size=index_size,
                                        files=files) for base in bases)
        for segment, following in zip(segments, segments[1:]):
            segment.next_offset = following.base_offset
            segment.load_inactive()
            segment.next_offset = following.base_offset
        active = segments[-1]
        if not (clean and active.load_clean()):
            begin_write()
            truncated = active.recover()
            if truncated:
                logger.warning("%s: truncated %d bytes of torn or corrupt data at the end of %s",
                               directory, truncated, active.log_path.name)
                active.flush()  # the cut is durable before anything is appended after it
        if active.size:
            active.first_append_ms = loaded_ms
        return segments
    except BaseException:
        for segment in segments:
            segment.close()
        raise
