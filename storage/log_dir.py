"""A partition log's directory: which files it holds besides the segments' own, and how they are read.

`<data_dir>/<topic>-<partition>/` holds the segments (`<base offset, 20 digits>.log`, `.index`,
`.timeindex`, `.txnindex`; minibroker.storage.segment), and:

* `log-start-offset`: the log start offset DeleteRecords moved up, decimal text, written atomically;
  absent while the log starts at its first segment. An unreadable one is recovered from what is on
  disk: the log starts at its first segment (the records it hid become readable; nothing is deleted).
* `clean-shutdown`: the marker a clean close leaves (minibroker.storage.log explains when it is trusted).
* `partition.metadata`: the id of the topic the partition belongs to, as Kafka writes it
  ("version: 0" and "topic_id: <base64 id>" lines), written when the directory is created: a
  directory left of a deleted topic is known by it (its id is one the metadata log saw deleted).
  Written without an fsync: one lost to a crash is written again when the directory is adopted.
* leftovers of unfinished work, dealt with when the directory is listed: our own `.tmp` files and
  the `.deleted`/`.cleaned`/`.tmp` segment files (a cleaning cut short, a deletion not finished) are
  removed, index files whose log is gone too; a `.swap` segment (the log cleaner had finished a
  cleaned segment and begun to swap it in) is swapped in, as Kafka's LogLoader does: the `.log`
  files whose base offset lies in the swap's offset range (its base offset to the offset after its
  last batch) are the ones it replaces and go, then the swap is renamed to `.log` and its indexes
  are rebuilt from it (minibroker.storage.cleaner describes the sequence and why every crash point is safe);
  an index `.swap` left without its `.log.swap` (the swap's log renamed, its indexes not yet) takes
  the indexes under the final names with it, as they are the replaced segment's: rebuilt at load.
"""

from __future__ import annotations

import base64
import logging
import os
import uuid
from pathlib import Path

from minibroker.storage.batch_scan import scan_headers
from minibroker.storage.files import TMP_SUFFIX, fsync_directory, unlink_if_exists, write_atomically
from minibroker.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_paths,
    txn_index_path,
)

__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "LOG_START_OFFSET_FILE",
    "PARTITION_METADATA_FILE",
    "read_partition_metadata",
    "write_partition_metadata",
    "create_marker",
    "has_marker",
    "list_segments",
    "read_log_start_offset",
    "remove_marker",
    "segment_files",
    "write_log_start_offset",
]

logger = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = "clean-shutdown"
LOG_START_OFFSET_FILE = "log-start-offset"
PARTITION_METADATA_FILE = "partition.metadata"
_OWN_TEMP_FILES = (LOG_START_OFFSET_FILE + TMP_SUFFIX, CLEAN_SHUTDOWN_FILE + TMP_SUFFIX)
CLEANED_SUFFIX = ".cleaned"  # a segment the log cleaner is writing (Kafka's suffixes)
SWAP_SUFFIX = ".swap"  # a cleaned segment being swapped in
DELETED_SUFFIX = ".deleted"  # a segment replaced or deleted, its files about to be removed
_LEFTOVER_SUFFIXES = tuple(
    s + extra
    for s in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
    for extra in (DELETED_SUFFIX, CLEANED_SUFFIX, TMP_SUFFIX)
) + (INDEX_SUFFIX + SWAP_SUFFIX, TIME_INDEX_SUFFIX + SWAP_SUFFIX, TXN_INDEX_SUFFIX + SWAP_SUFFIX)
_SEGMENT_NAME_LENGTH = 20 + len(LOG_SUFFIX)


def write_partition_metadata(directory: Path, topic_id: uuid.UUID) -> None:
    """Record the partition's topic id in its directory (Kafka's PartitionMetadataFile)."""
    text = f"version: 0\ntopic_id: {base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip('=')}\n"
    with open(directory / PARTITION_METADATA_FILE, "w") as out:
        out.write(text)


def read_partition_metadata(directory: Path) -> uuid.UUID | None:
    """The topic id a partition directory records; None when it records none (or nothing readable:
    the metadata log decides what the directory is, this file only tells a deleted topic's)."""
    try:
        text = (directory / PARTITION_METADATA_FILE).read_text()
    except (OSError, UnicodeDecodeError):
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "topic_id":
            value = value.strip()
            try:
                return uuid.UUID(bytes=base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
            except ValueError:
                return None
    return None


def list_segments(directory: Path) -> list[int]:
    """The base offsets of the segments in `directory`, sorted; leftovers of unfinished work are
    removed, and swaps completed, on the way (see the module docstring)."""
    bases: list[int] = []
    index_names: list[tuple[str, int]] = []
    names = os.listdir(directory)
    if any(name.endswith(LOG_SUFFIX + SWAP_SUFFIX) for name in names):
        _complete_swaps(directory, names)
        names = os.listdir(directory)
    for name in names:
        stem = name.partition(".")[0]
        if name.endswith((INDEX_SUFFIX + SWAP_SUFFIX, TIME_INDEX_SUFFIX + SWAP_SUFFIX)) and stem.isdigit():
            # A swap cut short between its `.log`'s rename and its indexes' (LogSegment.change_suffix):
            # the indexes under the final names are the replaced segment's. They go with the `.swap`
            # ones and are rebuilt from the log (Kafka's LogLoader deletes a base's indexes when it
            # finds an index `.swap`). The `.txnindex` is renamed before the log, so it is the new one.
            logger.warning("%s: found %s of an interrupted swap; the indexes of segment %s are rebuilt",
                           directory, name, stem)
            for path in segment_paths(directory, int(stem))[1:]:
                unlink_if_exists(path)
    for name in names:
        stem, dot, suffix = name.partition(".")
        if name in _OWN_TEMP_FILES:
            unlink_if_exists(directory / name)
            continue
        if not (dot and len(stem) == 20 and stem.isdigit()):
            continue
        if "." + suffix in _LEFTOVER_SUFFIXES:  # half-done segment work of Kafka-style tools
            unlink_if_exists(directory / name)
            continue
        if "." + suffix == LOG_SUFFIX:
            bases.append(int(stem))
        elif "." + suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            index_names.append((name, int(stem)))
    bases.sort()
    known = set(bases)
    for name, base in index_names:
        if base not in known:  # an index whose log is gone
            unlink_if_exists(directory / name)
    return bases


def _complete_swaps(directory: Path, names: list[str]) -> None:
    """Finish the swaps a crash cut short (Kafka's LogLoader.removeTempFilesAndCollectSwapFiles and
    what follows it): every `.log.swap` replaces the `.log` files whose base offsets fall in its
    offset range, and becomes a `.log` whose indexes are rebuilt at load."""
    swaps: list[tuple[int, int, Path]] = []
    for name in names:
        stem, _, suffix = name.partition(".")
        if "." + suffix == LOG_SUFFIX + SWAP_SUFFIX and len(stem) == 20 and stem.isdigit():
            base = int(stem)
            path = directory / name
            swaps.append((base, _next_offset(path, base), path))
    logs = sorted(int(n[:20]) for n in names if n.endswith(LOG_SUFFIX) and len(n) == 20 + len(LOG_SUFFIX)
                  and n[:20].isdigit())
    for base, next_offset, _ in swaps:
        for old in logs:
            if base <= old < next_offset or old == base:
                logger.info("%s: removing segment %d, replaced by a cleaned segment a crash left to swap in",
                            directory, old)
                for path in segment_paths(directory, old):
                    unlink_if_exists(path)
                if old != base:  # its aborted transactions are in the cleaned segment's index
                    unlink_if_exists(txn_index_path(directory, old))
    for base, _, path in swaps:
        for index in segment_paths(directory, base)[1:]:  # rebuilt from the swapped-in log
            unlink_if_exists(index)
        for index in segment_paths(directory, base, SWAP_SUFFIX)[1:]:
            unlink_if_exists(index)
        # The cleaned segment's transaction index, renamed before its log (LogSegment.change_suffix):
        # either still `.swap` here, or already in place. It keeps every marker, so no index at all
        # means the segments it replaces had no aborted transaction either.
        if txn_index_path(directory, base, SWAP_SUFFIX).exists():
            os.replace(txn_index_path(directory, base, SWAP_SUFFIX), txn_index_path(directory, base))
        os.replace(path, segment_paths(directory, base)[0])
        logger.warning("%s: completed the swap of cleaned segment %d that a crash interrupted", directory, base)
    fsync_directory(directory)


def _next_offset(path: Path, base: int) -> int:
    """The offset after the last whole batch of a segment file (its base offset when it has none)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        next_offset = base
        for header in scan_headers(lambda size, position: os.pread(fd, size, position), 0, os.fstat(fd).st_size):
            next_offset = header.last_offset + 1
        return next_offset
    finally:
        os.close(fd)


def segment_files(directory: Path) -> list[tuple[str, int]]:
    """(name, size) of the `.log` files in `directory`, from one listing (no descriptor kept); none
    when the directory does not exist."""
    try:
        with os.scandir(directory) as entries:
            return [(e.name, e.stat().st_size) for e in entries
                    if e.name.endswith(LOG_SUFFIX) and len(e.name) == _SEGMENT_NAME_LENGTH and e.name[:20].isdigit()]
    except FileNotFoundError:
        return []


def read_log_start_offset(directory: Path) -> int | None:
    """The log start offset DeleteRecords recorded; None when there is none, or it is unreadable."""
    try:
        data = (directory / LOG_START_OFFSET_FILE).read_bytes()
    except FileNotFoundError:
        return None
    try:
        return int(data.decode("ascii").strip())
    except ValueError:
        logger.error("%s: unreadable %s; the log starts at its first segment", directory, LOG_START_OFFSET_FILE)
        return None


def write_log_start_offset(directory: Path, offset: int) -> None:
    write_atomically(directory / LOG_START_OFFSET_FILE, f"{offset}\n".encode())


def has_marker(directory: Path) -> bool:
    """Whether the clean-shutdown marker is there (os.path: called for every partition at start)."""
    return os.path.exists(os.path.join(directory, CLEAN_SHUTDOWN_FILE))


def create_marker(directory: Path) -> None:
    os.close(os.open(directory / CLEAN_SHUTDOWN_FILE, os.O_WRONLY | os.O_CREAT, 0o644))


def remove_marker(directory: Path) -> None:
    unlink_if_exists(directory / CLEAN_SHUTDOWN_FILE)
