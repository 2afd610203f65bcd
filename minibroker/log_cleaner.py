"""The log cleaner task: compacts the broker's `cleanup.policy=compact` topics (minibroker.storage.cleaner has
the semantics: Kafka's LogCleaner, Cleaner and LogCleanerManager).

One task (log.cleaner.threads is accepted; one log is cleaned at a time, as with Kafka's default of
one thread): every log.cleaner.backoff.ms while nothing needs cleaning, else at once again, it
chooses the dirtiest cleanable log (on the event loop: reading segment sizes and a few batch
headers), cleans it on a worker thread (`trio.to_thread`: reading and rewriting segments, the
offset map, fsyncs; the event loop stays free for appends and fetches to the same log, which only
touch its active segment), then swaps the cleaned segments in on the event loop (a few renames and
fsyncs per group of segments), after checking that retention, DeleteRecords or a deletion did not
take the old segments meanwhile, and records the new first dirty offset in
`cleaner-offset-checkpoint`.

A log whose cleaning fails on damaged data is marked uncleanable (logged, in the metrics) and
skipped until the broker restarts, as Kafka does; a storage error only skips this round.
`clean_once` runs one round now (tests and tools drive it; the background task and it never run
two rounds at once). The metrics carry Kafka's names where Kafka has one (max-dirty-percent,
max-clean-time-secs, max-buffer-utilization-percent, uncleanable-partitions-count).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from minibroker.protocol.records import CorruptRecordError
from minibroker.storage.cleaner import (
    CleaningAborted,
    CleaningResult,
    CleaningRound,
    OffsetMap,
    choose_filthiest,
    clean,
    commit,
    discard,
    log_to_clean,
    read_checkpoint,
    write_checkpoint,
)
from minibroker.storage.errors import storage_error_message

if TYPE_CHECKING:
    from minibroker.clock import BrokerClock
    from minibroker.config import BrokerConfig
    from minibroker.producers import ProducerStates
    from minibroker.storage.manager import LogManager

log = logging.getLogger(__name__)

COMMIT_SLICE = 4  # cleaned groups swapped in per step of the event loop


@dataclass
class CleanerMetrics:
    runs: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    failures: int = 0
    max_dirty_percent: int = 0  # of the dirtiest compacted log at the last check
    last_clean_seconds: float = 0.0
    max_clean_seconds: float = 0.0
    max_buffer_utilization: float = 0.0  # of the last round
    in_progress: bool = False


class LogCleanerTask:
    def __init__(self, config: BrokerConfig, logs: LogManager, producer_states: ProducerStates,
                 clock: BrokerClock) -> None:
        """`producer_states`: where the last stable offset (cleaning stops there) and the
        producers' last data offsets (their batches are kept) come from."""
        self.logs = logs
        self.producer_states = producer_states
        self.clock = clock
        self.enabled: bool = config["log.cleaner.enable"]
        self.backoff_s: float = config["log.cleaner.backoff.ms"] / 1000
        self.dedupe_buffer_size: int = config["log.cleaner.dedupe.buffer.size"]
        self.load_factor: float = config["log.cleaner.io.buffer.load.factor"]
        self.metrics = CleanerMetrics()
        self.uncleanable: set[tuple[str, int]] = set()
        # Per partition, the earliest delete horizon of the tombstones its last cleaning kept: due, the
        # log is cleaned again without new dirty data (minibroker.storage.cleaner, LogToClean.tombstones_due).
        self.tombstone_horizons: dict[tuple[str, int], int] = {}
        self._round: CleaningRound | None = None
        self._lock = trio.Lock()

    async def run(self) -> None:
        """Clean while logs need it, sleeping log.cleaner.backoff.ms whenever none does."""
        if not self.enabled:
            return
        while True:
            try:
                result = await self.clean_once()
            except OSError as exc:  # the checkpoint file, say: tried again after the backoff
                log.error("log cleaner: %s", storage_error_message(exc))
                result = None
            if result is None:
                await self.clock.sleep(self.backoff_s)
            else:
                await trio.lowlevel.checkpoint()

    async def clean_once(self) -> CleaningResult | None:
        """Clean the dirtiest cleanable log now, if there is one; its result, else None."""
        async with self._lock:
            logs = self.logs
            now_ms = self.clock.now_ms()
            checkpoints = read_checkpoint(logs.data_dir)
            candidates = []
            for topic, partition, plog in list(logs.logs()):
                if "compact" not in plog.config.cleanup_policy.split(",") or (topic, partition) in self.uncleanable:
                    continue
                try:
                    candidate = log_to_clean(topic, partition, plog, checkpoints.get((topic, partition)), now_ms,
                                             self.tombstone_horizons.get((topic, partition)),
                                             self.producer_states.last_stable_offset(topic, partition, plog, now_ms))
                except OSError as exc:
                    log.error("%s-%d: cannot look at the log for cleaning: %s", topic, partition,
                              storage_error_message(exc))
                    continue
                if candidate.checkpoint_reset:
                    checkpoints[(topic, partition)] = candidate.first_dirty_offset
                    write_checkpoint(logs.data_dir, checkpoints)
                candidates.append(candidate)
            self.metrics.max_dirty_percent = int(100 * max((c.cleanable_ratio for c in candidates), default=0.0))
            target = choose_filthiest(candidates)
            if target is None:
                return None
            key = (target.topic, target.partition)
            name = f"{target.topic}-{target.partition}"
            producers = self.producer_states.last_data_offsets(target.topic, target.partition, target.log)
            round_ = CleaningRound.of(target, now_ms, producers)
            offset_map = OffsetMap(self.dedupe_buffer_size, self.load_factor)
            log.info("cleaning %s: offsets %d to %d dirty (%.0f%% of %d bytes)", name, target.first_dirty_offset,
                     target.first_uncleanable_offset, 100 * target.cleanable_ratio, target.total_bytes)
            started = time.perf_counter()
            self._round = round_
            self.metrics.in_progress = True
            try:
                result = await trio.to_thread.run_sync(clean, round_, offset_map, abandon_on_cancel=True)
            except trio.Cancelled:
                round_.aborted = True  # the thread stops at its next batch and removes its files
                raise
            except CleaningAborted:
                log.info("cleaning %s was aborted", name)
                return None
            except CorruptRecordError as exc:
                self.uncleanable.add(key)
                self.metrics.failures += 1
                log.error("%s cannot be cleaned, marked uncleanable until restart: %s", name, exc)
                return None
            except OSError as exc:
                self.metrics.failures += 1
                log.error("cleaning %s failed, tried again later: %s", name, storage_error_message(exc))
                return None
            finally:
                self._round = None
                self.metrics.in_progress = False
            if round_.aborted:
                discard(result)
                return None
            try:
                # A few groups at a time (each a handful of renames and two fsyncs), the loop free between.
                while commit(result, COMMIT_SLICE):
                    await trio.lowlevel.checkpoint()
            except OSError as exc:
                self.metrics.failures += 1
                log.error("swapping in the cleaned segments of %s failed: %s", name, storage_error_message(exc))
                discard(result)
                return None
            swapped = result.committed
            elapsed = time.perf_counter() - started
            stats = result.stats
            if result.complete:
                checkpoints = read_checkpoint(logs.data_dir)
                checkpoints[key] = result.end_offset
                # Entries of partitions that no longer exist go (Kafka's updateCheckpoints).
                write_checkpoint(logs.data_dir, {k: v for k, v in checkpoints.items() if logs.log(*k) is not None})
                if result.tombstone_horizon is not None:
                    self.tombstone_horizons[key] = result.tombstone_horizon
                else:
                    self.tombstone_horizons.pop(key, None)
            else:
                log.info("%s changed while it was cleaned: %d of %d cleaned segment(s) swapped in",
                         name, swapped, len(result.swaps))
            metrics = self.metrics
            metrics.runs += 1
            metrics.bytes_read += stats.bytes_read
            metrics.bytes_written += stats.bytes_written
            metrics.records_removed += stats.records_read - stats.records_kept
            metrics.last_clean_seconds = elapsed
            metrics.max_clean_seconds = max(metrics.max_clean_seconds, elapsed)
            metrics.max_buffer_utilization = stats.map_utilization
            log.info("cleaned %s in %.3f s: %d segment(s) into %d, %d records kept of %d, first dirty offset now %d",
                     name, elapsed, sum(len(old) for _, old in result.swaps), swapped, stats.records_kept,
                     stats.records_read, result.end_offset)
            return result
