"""A partition log's directory: which files it holds besides the segments' own, and how they are read.

`<data_dir>/<topic>-<partition>/` holds the segments (`<base offset, 20 digits>.log`, `.index`,
`.timeindex`, `.txnindex`; storage.segment), and:

* `log-start-offset`: the log start offset DeleteRecords moved up, decimal text, written atomically;
  absent while the log starts at its first segment. An unreadable one is recovered from what is on
  disk: the log starts at its first segment (the records it hid become readable; nothing is deleted).
* `clean-shutdown`: the marker a clean close leaves (storage.log explains when it is trusted).
* leftovers of unfinished work, removed when the directory is listed: our own `.tmp` files, the
  `.deleted`/`.cleaned`/`.swap`/`.tmp` segment files of Kafka-style tools, index files whose log is
  gone.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from storage.files import TMP_SUFFIX, unlink_if_exists, write_atomically
from storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX

__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "LOG_START_OFFSET_FILE",
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
_OWN_TEMP_FILES = (LOG_START_OFFSET_FILE + TMP_SUFFIX, CLEAN_SHUTDOWN_FILE + TMP_SUFFIX)
_LEFTOVER_SUFFIXES = tuple(
    s + extra
    for s in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
    for extra in (".deleted", ".cleaned", ".swap", TMP_SUFFIX)
)
_SEGMENT_NAME_LENGTH = 20 + len(LOG_SUFFIX)


def list_segments(directory: Path) -> list[int]:
    """The base offsets of the segments in `directory`, sorted; leftovers of unfinished work are
    removed on the way (see the module docstring)."""
    bases: list[int] = []
    index_names: list[tuple[str, int]] = []
    for name in os.listdir(directory):
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
