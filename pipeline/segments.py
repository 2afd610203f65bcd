"""The audit topic's records straight from a broker's data directory, in plain Python: the segment
files of each `__minibroker_audit-N` partition (`minibroker.storage.log_dir`), their whole batches
(`minibroker.storage.batch_scan.scan_headers`) and records (`minibroker.protocol.records.decode_records`).
`pipeline.sources.SegmentRecordsSource` reads byte ranges of them for Spark; `iter_audit_events`
decodes the JSON values here too (`minibroker.storage.audit_format.decode_event`), for tests and tools that
want the events without Spark.

Never opens the log through `storage.log.PartitionLog` (that would run recovery on a live broker's
files); reads the files as they are and, like a fetch, only whole batches, so a batch being written
is not seen. Records below the partition's log start offset (DeleteRecords, retention) are skipped;
control and compressed batches (the broker writes neither; a client could) are skipped and counted.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Iterator, NamedTuple

from minibroker.protocol.records import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    InvalidRecordError,
    decode_records,
    iter_headers,
    read_header,
)
from minibroker.storage import log_dir
from minibroker.storage.audit_format import AUDIT_TOPIC, decode_event
from minibroker.storage.batch_scan import scan_headers

__all__ = ["SegmentFile", "batch_positions", "iter_audit_events", "iter_batches", "iter_records", "segment_files"]

log = logging.getLogger(__name__)

READ_CHUNK = 8 * 1024 * 1024


class SegmentFile(NamedTuple):
    path: str
    partition: int
    log_start_offset: int  # of its partition


def segment_files(data_dir: str | Path, topic: str = AUDIT_TOPIC) -> list[SegmentFile]:
    """Every segment file of the topic's partitions, by partition, oldest first. Empty when the topic
    does not exist (nothing was audited yet)."""
    data_dir = Path(data_dir).resolve()
    if not data_dir.is_dir():
        return []
    prefix = topic + "-"
    partitions = sorted(
        (int(entry.name[len(prefix):]), entry) for entry in data_dir.iterdir()
        if entry.name.startswith(prefix) and entry.name[len(prefix):].isdigit() and entry.is_dir()
    )
    out: list[SegmentFile] = []
    for partition, directory in partitions:
        start = log_dir.read_log_start_offset(directory) or 0
        out.extend(SegmentFile(str(directory / name), partition, start)
                   for name, _ in sorted(log_dir.segment_files(directory)))
    return out


def batch_positions(path: str) -> list[int]:
    """Where each whole batch of a segment file starts and, last, where the last whole one ends (a
    batch being written, or a torn tail, is left out)."""
    with open(path, "rb") as file:
        fd = file.fileno()
        headers = scan_headers(lambda size, position: os.pread(fd, size, position), 0, os.fstat(fd).st_size)
        return [0, *(header.position + header.size for header in headers)]


def iter_batches(path: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
    """The whole batches of a segment file between byte positions `start` (a batch boundary) and
    `end` (default: the end of the file), read in chunks; a torn tail is not yielded."""
    with open(path, "rb") as file:
        file.seek(start)
        remaining = (os.fstat(file.fileno()).st_size if end is None else end) - start
        pending = b""
        while remaining > 0:
            chunk = file.read(min(READ_CHUNK, remaining))
            if not chunk:
                return
            remaining -= len(chunk)
            buf = pending + chunk if pending else chunk
            done = 0
            for header in iter_headers(buf):
                done = header.position + header.size
                yield buf[header.position:done]
            pending = buf[done:]


def iter_records(path: str, start: int = 0, end: int | None = None, log_start_offset: int = 0,
                 skipped: list[int] | None = None) -> Iterator[tuple[int, int, bytes | None, bytes | None, int]]:
    """(offset, timestamp, key, value, timestamp type: 0 create, 1 log append) of each data record in
    the batches of [start, end) at or above `log_start_offset`. Batches that cannot be read here
    add one to `skipped[0]`."""
    for batch in iter_batches(path, start, end):
        attributes = read_header(batch).attributes
        if attributes & (ATTR_CONTROL | ATTR_COMPRESSION_MASK):
            if skipped is not None:
                skipped[0] += 1
            continue
        kind = 1 if attributes & ATTR_TIMESTAMP_TYPE else 0
        try:
            for offset, ts, key, value in decode_records(batch):
                if offset >= log_start_offset:
                    yield offset, ts, key, value, kind
        except InvalidRecordError:
            if skipped is not None:
                skipped[0] += 1


def iter_audit_events(data_dir: str | Path, topic: str = AUDIT_TOPIC) -> Iterator[tuple[int, dict]]:
    """(offset, event) for every audit event in a data directory, partition by partition in offset
    order (no Spark). Values that are not JSON objects are skipped with a warning."""
    for segment in segment_files(data_dir, topic):
        skipped = [0]
        for offset, _ts, _key, value, _kind in iter_records(segment.path, 0, None, segment.log_start_offset, skipped):
            if value is None:
                continue
            try:
                yield offset, decode_event(value)
            except ValueError:
                skipped[0] += 1
        if skipped[0]:
            log.warning("%s: skipped %d batch(es) or record(s) that are not audit events", segment.path, skipped[0])
