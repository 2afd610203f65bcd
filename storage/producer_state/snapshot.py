"""Producer-state snapshot files: Kafka's layout (version 1), written atomically, checked on read.

One file per snapshot, `<directory>/<20-digit offset>.snapshot`, the offset being the log end the
state was taken at. Every producer state manager writes and reads the same rows, one per producer
id: its latest batch, as Kafka writes an entry. A snapshot that fails its CRC, is truncated or holds
impossible values raises CorruptSnapshot; the manager logs it, deletes it and tries the next older.
Pure file handling: no clock, no trio.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path
from typing import Iterable

from construct import Const, Int16sb, Int32sb, Int32ub, Int64sb, PrefixedArray, Struct, Terminated
from crc32c import crc32c

from minibroker.storage.files import TMP_SUFFIX, unlink_if_exists, write_atomically

SEQUENCE_SPACE = 1 << 31  # sequences are int32 >= 0; 2147483647 is followed by 0
MAX_SEQUENCE = SEQUENCE_SPACE - 1
SNAPSHOTS_TO_KEEP = 2

# --- On-disk format -------------------------------------------------------------------------------
# Kafka's producer snapshot, version 1 (ProducerStateManager.PID_SNAPSHOT_MAP_SCHEMA). All integers
# are big-endian. The CRC32C covers everything after the crc field: the entry count and the entries.

SNAPSHOT_VERSION = 1

PRODUCER_SNAPSHOT_ENTRY = Struct(
    "producer_id" / Int64sb,
    "epoch" / Int16sb,  # current epoch of the producer
    "last_sequence" / Int32sb,  # last sequence of its latest batch
    "last_offset" / Int64sb,  # last offset of its latest batch
    "offset_delta" / Int32sb,  # last offset - base offset of that batch (= last - first sequence)
    "timestamp" / Int64sb,  # here: wall-clock ms of the producer's last append (expiry's origin)
    "coordinator_epoch" / Int32sb,  # of the producer's last marker; -1: none
    "current_txn_first_offset" / Int64sb,  # first offset of its open transaction; -1: none
)

PRODUCER_SNAPSHOT = Struct(
    "version" / Const(SNAPSHOT_VERSION, Int16sb),
    "crc" / Int32ub,  # CRC32C of bytes 6..end
    "entries" / PrefixedArray(Int32sb, PRODUCER_SNAPSHOT_ENTRY),
    Terminated,
)

# The fixed part in front of the entries, parsed on its own so the entries can be read in bulk.
PRODUCER_SNAPSHOT_HEADER = Struct(
    "version" / Int16sb,
    "crc" / Int32ub,
    "count" / Int32sb,
)
_CRC_START = 6
_ENTRIES_START = PRODUCER_SNAPSHOT_HEADER.sizeof()

# A snapshot of a busy partition holds up to millions of entries, and construct takes ~11 us per
# entry either way; the entries are therefore packed and unpacked with a struct.Struct derived
# field by field from PRODUCER_SNAPSHOT_ENTRY (never a compiled construct: struct checks lengths).
_SNAPSHOT_ENTRY = struct.Struct(
    ">" + "".join(field.subcon.fmtstr.lstrip("<>=!@") for field in PRODUCER_SNAPSHOT_ENTRY.subcons)
)
assert _SNAPSHOT_ENTRY.size == PRODUCER_SNAPSHOT_ENTRY.sizeof() == 46

# One row per producer id, in PRODUCER_SNAPSHOT_ENTRY's order: (producer_id, epoch, last_sequence,
# last_offset, offset_delta, last_append_ms, coordinator_epoch, current_txn_first_offset).
SnapshotRow = tuple[int, int, int, int, int, int, int, int]

_SNAPSHOT_NAME = re.compile(r"^(\d{20})\.snapshot$")


class CorruptSnapshot(Exception):
    pass


def snapshot_path(directory: Path, offset: int) -> Path:
    """Where the snapshot taken at `offset` lives: `<directory>/<20-digit offset>.snapshot`."""
    return Path(directory) / f"{offset:020d}.snapshot"


def list_snapshots(directory: Path) -> list[tuple[int, Path]]:
    """The snapshot files in `directory` as (offset, path), oldest first."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        match = _SNAPSHOT_NAME.match(name)
        if match:
            found.append((int(match.group(1)), Path(directory) / name))
    found.sort()
    return found


def write_snapshot(directory: Path, offset: int, rows: Iterable[SnapshotRow], count: int) -> Path:
    """Write `count` rows as the snapshot at `offset`, atomically; return its path.

    Atomic: written to a temporary file, fsynced, renamed over the final name, and the directory
    fsynced, so a crash leaves either the old set of snapshots or the new one.
    """
    if offset < 0:
        raise ValueError(f"snapshot offset must be >= 0: {offset}")
    directory = Path(directory)
    entries = bytearray(count * _SNAPSHOT_ENTRY.size)
    position = 0
    pack_into = _SNAPSHOT_ENTRY.pack_into
    for row in rows:
        pack_into(entries, position, *row)
        position += _SNAPSHOT_ENTRY.size
    assert position == len(entries), f"{position // _SNAPSHOT_ENTRY.size} rows for a count of {count}"
    # The CRC covers bytes 6..end: the entry count, then the entries.
    crc = crc32c(entries, crc32c(Int32sb.build(count)))
    head = PRODUCER_SNAPSHOT_HEADER.build({"version": SNAPSHOT_VERSION, "crc": crc, "count": count})
    path = snapshot_path(directory, offset)
    directory.mkdir(parents=True, exist_ok=True)
    write_atomically(path, head, entries)
    return path


def read_snapshot(path: Path) -> list[SnapshotRow]:
    """The rows of a snapshot file, each checked; raises CorruptSnapshot for any fault."""
    data = path.read_bytes()
    if len(data) < _ENTRIES_START:
        raise CorruptSnapshot(f"{len(data)} bytes, shorter than the {_ENTRIES_START}-byte header")
    header = PRODUCER_SNAPSHOT_HEADER.parse(data)
    if header.version != SNAPSHOT_VERSION:
        raise CorruptSnapshot(f"version {header.version}, expected {SNAPSHOT_VERSION}")
    view = memoryview(data)
    actual = crc32c(view[_CRC_START:])
    if actual != header.crc:
        raise CorruptSnapshot(f"CRC mismatch: stored {header.crc:#010x}, computed {actual:#010x}")
    count = header.count
    expected = _ENTRIES_START + count * _SNAPSHOT_ENTRY.size
    if count < 0 or len(data) != expected:
        raise CorruptSnapshot(f"{count} entries need {expected} bytes, the file has {len(data)}")
    rows: list[SnapshotRow] = list(_SNAPSHOT_ENTRY.iter_unpack(view[_ENTRIES_START:]))
    seen = set()
    for producer_id, epoch, last_seq, last_offset, delta, _, coordinator_epoch, txn_first in rows:
        if producer_id in seen:
            raise CorruptSnapshot(f"producer {producer_id} appears twice")
        # An entry without a batch (a marker set its epoch): last sequence -1, offset -1, delta 0.
        no_batch = last_seq == -1 and last_offset == -1 and delta == 0
        if (
            producer_id < 0
            or epoch < 0
            or not (no_batch or 0 <= last_seq <= MAX_SEQUENCE)
            or delta < 0
            or (last_offset < delta and not no_batch)
            or coordinator_epoch < -1
            or txn_first < -1
        ):
            raise CorruptSnapshot(
                f"impossible entry: producer {producer_id} epoch {epoch} last sequence {last_seq} "
                f"last offset {last_offset} offset delta {delta} coordinator epoch {coordinator_epoch} "
                f"transaction first offset {txn_first}"
            )
        seen.add(producer_id)
    return rows


def remove_stale_temporaries(directory: Path) -> None:
    """A crash during write_snapshot can leave a temporary file behind; it was never renamed."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    for name in names:
        if name.endswith(".snapshot" + TMP_SUFFIX):  # what write_atomically leaves when interrupted
            unlink_if_exists(directory / name)
