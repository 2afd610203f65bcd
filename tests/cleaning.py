"""Clean a log to its end now, with the broker's log cleaner (minibroker.storage.cleaner), for tests of what
lives on compacted topics (the offsets store): the active segment rolled first, so everything
written so far can be cleaned, then rounds until none is due."""

from __future__ import annotations

from minibroker.storage.cleaner import CleaningRound, OffsetMap, choose_filthiest, clean, commit, log_to_clean
from minibroker.storage.log import PartitionLog


def clean_fully(log: PartitionLog, now_ms: int, *, memory: int = 1 << 20) -> int:
    """Roll and clean `log` until nothing is left to clean; how many rounds ran."""
    log.roll(now_ms)
    checkpoint = None
    rounds = 0
    while (target := choose_filthiest([log_to_clean("t", 0, log, checkpoint, now_ms)])) is not None:
        result = clean(CleaningRound.of(target, now_ms), OffsetMap(memory))
        commit(result)
        assert result.complete
        checkpoint = result.end_offset
        rounds += 1
        if checkpoint >= log.active_segment.base_offset:
            break
    return rounds
