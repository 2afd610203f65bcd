"""Audit events straight from a broker's data directory, in plain Python (no Spark): the segment
files of `__minibroker_audit-0`, their whole batches (`protocol.records.iter_headers`), their records
(`decode_records`) and the JSON values (`storage.audit_format.decode_event`).

Never opens the log through `storage.log.PartitionLog` (that would run recovery on a live broker's
files); reads the files as they are and, like a fetch, only whole batches, so a batch being written
is not seen. Records below the partition's log start offset (DeleteRecords) are skipped.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterator

from protocol.records import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    InvalidRecordError,
    decode_records,
    iter_headers,
    read_header,
)
from storage.audit_format import AUDIT_TOPIC, decode_event
from storage.log_dir import read_log_start_offset, segment_files

__all__ = ["audit_segment_files", "iter_audit_events", "iter_segment_events"]

log = logging.getLogger(__name__)

READ_CHUNK = 8 * 1024 * 1024


def audit_segment_files(data_dir: str | Path, topic: str = AUDIT_TOPIC) -> list[tuple[str, int]]:
    """(segment path, log start offset) for each segment of the topic's partition 0, oldest first.
    Empty when the topic does not exist (nothing was audited yet)."""
    directory = Path(data_dir).resolve() / f"{topic}-0"
    if not directory.is_dir():
        return []
    start = read_log_start_offset(directory) or 0
    return [(str(directory / name), start) for name, _ in sorted(segment_files(directory))]


def _iter_batches(path: str) -> Iterator[bytes]:
    """The whole batches of one segment file, read in chunks; a torn tail is not yielded."""
    with open(path, "rb") as file:
        pending = b""
        while True:
            chunk = file.read(READ_CHUNK)
            if not chunk:
                return
            buf = pending + chunk if pending else chunk
            end = 0
            for header in iter_headers(buf):
                end = header.position + header.size
                yield buf[header.position : end]
            pending = buf[end:]


def iter_segment_events(path: str, log_start_offset: int = 0) -> Iterator[tuple[int, dict]]:
    """(offset, event) for each audit record of one segment file at or above `log_start_offset`.
    Control batches, compressed batches (the broker writes none; a client could) and values that
    are not JSON objects are skipped with a warning."""
    skipped = 0
    for batch in _iter_batches(path):
        if read_header(batch).attributes & (ATTR_CONTROL | ATTR_COMPRESSION_MASK):
            skipped += 1
            continue
        try:
            for offset, _ts, _key, value in decode_records(batch):
                if offset < log_start_offset or value is None:
                    continue
                try:
                    yield offset, decode_event(value)
                except ValueError:
                    skipped += 1
        except InvalidRecordError:
            skipped += 1
    if skipped:
        log.warning("%s: skipped %d batch(es) or record(s) that are not audit events", path, skipped)


def iter_audit_events(data_dir: str | Path, topic: str = AUDIT_TOPIC) -> Iterator[tuple[int, dict]]:
    """(offset, event) for every audit event in a data directory, in offset order (no Spark)."""
    for path, start in audit_segment_files(data_dir, topic):
        yield from iter_segment_events(path, start)
