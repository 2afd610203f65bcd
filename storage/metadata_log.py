"""The metadata log on disk: KRaft's `__cluster_metadata` partition, its snapshots and its quorum state.

Layout of `<metadata dir>/__cluster_metadata-0/` (Kafka's names):

* segments `00000000000000000000.log` ... of v2 record batches (a `PartitionLog`, so appends, crash
  recovery and the clean-shutdown marker are the partition logs' own), each batch one change of the
  controller, its records the metadata records of minibroker.storage.metadata_image, its
  partitionLeaderEpoch the quorum's epoch;
* snapshots `<end offset, 20 digits>-<epoch, 10 digits>.checkpoint`: the whole image as records,
  up to (not including) the end offset, ending with a SnapshotFooterRecord, written atomically
  (a temporary file, fsynced, renamed);
* `quorum-state`: the quorum's leader and epoch ({"leaderId", "leaderEpoch", "votedId",
  "appliedOffset", "currentVoters", "data_version"}, as Kafka's FileQuorumStateStore writes it).
  There is one voter, the controller; it elects itself at each start, one epoch up.

Opening reads the latest snapshot, then replays the log from the snapshot's end: the image is the
one the last acknowledged change left. Every append is one batch, fsynced before `append` returns
(what the controller tells a client is on disk, as a KRaft quorum commits before it answers), so a
kill -9 loses nothing acknowledged; a batch torn by one is removed by the log's recovery, as any
partition log's torn tail. A snapshot is written once `metadata.log.max.record.bytes.between.snapshots`
bytes of records came after the last one (Kafka's default, 20 MiB), and at a clean close, after
which the segments wholly below it are deleted: a restart reads a snapshot and the little after it.

Damage (a batch whose CRC does not match inside the log, a record that cannot be read or does not
fit the image, a snapshot without its footer): `DamagedFileError` naming the file. Nothing is
guessed around: the controller's metadata decides what every partition directory is.

No clock (callers pass `now_ms`), no trio.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Iterator, Sequence

from minibroker.protocol.records import encode_batch, iter_headers
from minibroker.protocol.records.codec import decode_records
from minibroker.protocol.records.validation import CorruptRecordError, InvalidRecordError, check_batch
from minibroker.storage.config import LogConfig
from minibroker.storage import acls_image  # noqa: F401  (registers the ACL section and its records)
from minibroker.storage.errors import DamagedFileError
from minibroker.storage.file_cache import FileCache
from minibroker.storage.files import TMP_SUFFIX, unlink_if_exists, write_atomically
from minibroker.storage.log import PartitionLog
from minibroker.storage.metadata_image import (
    ImageSection,
    MetadataImage,
    MetadataRecord,
    decode_record,
    encode_record,
    record_type,
)
from minibroker.storage.segment import segment_name
from dataclasses import dataclass

__all__ = ["METADATA_DIR", "METADATA_PARTITION", "METADATA_TOPIC", "MetadataLog", "SNAPSHOT_BYTES"]

log = logging.getLogger(__name__)

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
METADATA_DIR = f"{METADATA_TOPIC}-{METADATA_PARTITION}"
QUORUM_STATE = "quorum-state"
SNAPSHOT_SUFFIX = ".checkpoint"
_SNAPSHOT = re.compile(r"^(?P<offset>\d{20})-(?P<epoch>\d{10})\.checkpoint$")
SNAPSHOT_BYTES = 20 * 1024 * 1024  # metadata.log.max.record.bytes.between.snapshots
SEGMENT_BYTES = 16 * 1024 * 1024  # small, so that a snapshot lets old segments go
RECORDS_PER_BATCH = 2000  # in a snapshot (a change is one batch, however large)
READ_CHUNK = 1 << 20

# The log's settings: every append fsynced, nothing retained by time or size (snapshots do that).
_LOG_CONFIG = LogConfig(flush_messages=1, segment_bytes=SEGMENT_BYTES, retention_ms=-1, retention_bytes=-1,
                        segment_ms=2**63 - 1, message_timestamp_after_max_ms=2**63 - 1,
                        max_message_bytes=2**31 - 1)


@record_type
@dataclass(frozen=True, slots=True)
class SnapshotFooterRecord(MetadataRecord):
    """The last record of a complete snapshot (Kafka's SnapshotFooterRecord)."""


class MetadataLog:
    """The metadata log of one controller and the image it builds (module docstring)."""

    def __init__(self, directory: Path, plog: PartitionLog, image: MetadataImage, leader_id: int,
                 leader_epoch: int, snapshot_bytes: int) -> None:
        self.directory = directory
        self._log = plog
        self.image = image
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.snapshot_bytes = snapshot_bytes
        self.snapshot_offset = 0  # the end offset of the latest snapshot (0: none)
        self._since_snapshot = 0  # bytes of records appended after it
        self.created = False  # the log was made by this open (there was none)

    # -- opening -------------------------------------------------------------------------------------

    @classmethod
    def open(cls, directory: Path, now_ms: int, *, leader_id: int, extra_sections: Sequence[ImageSection] = (),
             snapshot_bytes: int = SNAPSHOT_BYTES, files: FileCache | None = None) -> MetadataLog:
        """Open (or create) the metadata log in `directory` (the `__cluster_metadata-0` directory)
        and build its image. DamagedFileError names a file that cannot be used."""
        directory = Path(directory)
        created = not directory.exists()
        directory.mkdir(parents=True, exist_ok=True)
        if created:
            os.chmod(directory, 0o700)  # it holds SCRAM's salted keys: the owner's only
        epoch = _read_quorum_epoch(directory / QUORUM_STATE) + 1
        image = MetadataImage(extra_sections)
        snapshot_offset = 0
        snapshot = _latest_snapshot(directory)
        if snapshot is not None:
            snapshot_offset = snapshot[0]
            image.apply_all(_read_snapshot(snapshot[1]))
        _check_no_damage_before_the_tail(directory)
        plog = PartitionLog.open(directory, _LOG_CONFIG, now_ms, files=files)
        metadata = cls(directory, plog, image, leader_id, epoch, snapshot_bytes)
        metadata.created = created
        metadata.snapshot_offset = snapshot_offset
        try:
            metadata._replay_from(snapshot_offset)
        except BaseException:
            plog.close(clean=False)
            raise
        image.offset = plog.log_end_offset - 1
        _write_quorum_state(directory / QUORUM_STATE, leader_id, epoch, plog.log_end_offset)
        return metadata

    def _replay_from(self, snapshot_offset: int) -> None:
        plog = self._log
        start, end = plog.log_start_offset, plog.log_end_offset
        if end < snapshot_offset:
            # The log lost what the snapshot holds (a crash before the segments were written back, or
            # a log removed by hand): the snapshot is the image; the log goes on after it.
            log.warning("%s ends at %d, before its snapshot at %d: continuing from the snapshot",
                        self.directory, end, snapshot_offset)
            plog.truncate_fully_and_start_at(snapshot_offset)
            return
        if start > snapshot_offset:
            raise DamagedFileError(self.directory, f"the log starts at offset {start}, after the latest snapshot "
                                   f"(at {snapshot_offset}): the records between are lost",
                                   "restore the missing segments or the snapshot")
        replayed = 0
        for record in self._records_from(snapshot_offset):
            replayed += 1
        if replayed:
            log.debug("%s: replayed %d record(s) after the snapshot at %d", self.directory, replayed, snapshot_offset)

    def _records_from(self, offset: int) -> Iterator[MetadataRecord]:
        """Apply (and yield) every record of the log from `offset` on, checking each batch."""
        plog = self._log
        position = offset
        while position < plog.log_end_offset:
            data = plog.read(position, READ_CHUNK)
            if not data:
                break
            advanced = False
            for header in iter_headers(data):
                if header.last_offset < position:
                    continue
                segment = plog._segment_holding(header.base_offset)
                where = segment.log_path
                try:
                    check_batch(data, header.position)
                except (CorruptRecordError, InvalidRecordError) as exc:
                    raise DamagedFileError(where, f"the batch at offset {header.base_offset} is damaged ({exc})",
                                           _REMEDY) from None
                batch = memoryview(data)[header.position: header.position + header.size]
                for offset_delta, record in enumerate(_batch_records(batch, where, header.base_offset)):
                    try:
                        self.image.apply(record)
                    except ValueError as exc:
                        raise DamagedFileError(where, f"the record at offset {header.base_offset + offset_delta} "
                                               f"does not fit the metadata ({exc})", _REMEDY) from None
                    yield record
                self._since_snapshot += header.size
                position = header.last_offset + 1
                advanced = True
            if not advanced:
                raise DamagedFileError(self._log.directory, f"cannot read past offset {position}", _REMEDY)

    # -- reading ---------------------------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        """The offset the next record gets: the quorum's log end offset and high watermark."""
        return self._log.log_end_offset

    @property
    def start_offset(self) -> int:
        return self._log.log_start_offset

    # -- appending -------------------------------------------------------------------------------------

    def append(self, records: Sequence[MetadataRecord], now_ms: int) -> int:
        """Write `records` as one batch, durable before this returns, then apply them to the image.
        Returns the offset of the first. An OSError leaves the log and the image as they were."""
        if not records:
            return self.end_offset
        batch = bytearray(encode_batch([(None, encode_record(r)) for r in records], now_ms))
        batch[12:16] = self.leader_epoch.to_bytes(4, "big", signed=True)  # outside the CRC
        result = self._log.append(batch, now_ms)  # fsynced (flush.messages=1); rolled back on failure
        self.image.apply_all(records)
        self.image.offset = result.last_offset
        self._since_snapshot += len(batch)
        if self._since_snapshot >= self.snapshot_bytes:
            try:
                self.snapshot(now_ms)
            except OSError as exc:  # the log has everything: a snapshot is only a shortcut
                log.error("%s: writing a snapshot failed, tried again later: %s", self.directory, exc)
        return result.base_offset

    # -- snapshots ---------------------------------------------------------------------------------------

    def snapshot(self, now_ms: int) -> Path | None:
        """Write the image as a snapshot at the log's end, then drop older snapshots and the
        segments wholly below it. None when the latest snapshot is already at the end."""
        end = self.end_offset
        if end == self.snapshot_offset and _latest_snapshot(self.directory) is not None:
            return None
        records = list(self.image.records())
        chunks = []
        for start in range(0, len(records), RECORDS_PER_BATCH):
            chunk = records[start: start + RECORDS_PER_BATCH]
            chunks.append(encode_batch([(None, encode_record(r)) for r in chunk], now_ms))
        chunks.append(encode_batch([(None, encode_record(SnapshotFooterRecord()))], now_ms))
        path = self.directory / f"{end:020d}-{self.leader_epoch:010d}{SNAPSHOT_SUFFIX}"
        write_atomically(path, *chunks)
        self.snapshot_offset = end
        self._since_snapshot = 0
        for name in os.listdir(self.directory):
            match = _SNAPSHOT.match(name)
            if match and int(match["offset"]) < end:
                unlink_if_exists(self.directory / name)
        self._log.delete_records_before(end)
        return path

    def close(self, clean: bool = True, now_ms: int | None = None) -> None:
        """Close the log; a clean close snapshots first (when anything came after the last one)."""
        try:
            if clean and now_ms is not None and self.end_offset > self.snapshot_offset:
                try:
                    self.snapshot(now_ms)
                except OSError as exc:
                    log.error("%s: writing a snapshot at close failed: %s", self.directory, exc)
        finally:
            self._log.close(clean)


_REMEDY = ("the metadata log holds every topic, config, quota and credential of the cluster; restore "
           "this file from a backup (the broker does not start on a metadata log it cannot read)")


def _batch_records(batch: memoryview, where: Path, base_offset: int) -> Iterator[MetadataRecord]:
    try:
        decoded = list(decode_records(batch))
    except (ValueError, CorruptRecordError) as exc:
        raise DamagedFileError(where, f"the batch at offset {base_offset} cannot be read ({exc})", _REMEDY) from None
    for offset_delta, _, _, value in decoded:
        if value is None:
            raise DamagedFileError(where, f"the record at offset {base_offset + offset_delta} has no value", _REMEDY)
        try:
            yield decode_record(value)
        except ValueError as exc:
            raise DamagedFileError(where, f"the record at offset {base_offset + offset_delta} cannot be read "
                                   f"({exc})", _REMEDY) from None


def _check_no_damage_before_the_tail(directory: Path) -> None:
    """A crash can tear only the batch being written, the last: a damaged batch with a whole, valid
    batch after it is damage, which the log's recovery would cut away with everything after it (a
    partition's followers would fetch it again; the metadata log has no one to fetch from).
    DamagedFileError naming the segment, before the log is opened."""
    segments = sorted(name for name in os.listdir(directory) if name.endswith(".log") and name[:20].isdigit())
    if not segments:
        return
    path = directory / segments[-1]
    data = path.read_bytes()
    position = 0
    for header in iter_headers(data):
        if header.position != position:
            break
        try:
            check_batch(data, header.position)
        except (CorruptRecordError, InvalidRecordError) as exc:
            following = header.position + header.size
            if any(_valid_at(data, at) for at in (following,) if at < len(data)):
                raise DamagedFileError(path, f"the batch at byte {header.position} is damaged ({exc}), with "
                                       "committed batches after it", _REMEDY) from None
            return
        position += header.size


def _valid_at(data: bytes, position: int) -> bool:
    try:
        check_batch(data, position)
    except (CorruptRecordError, InvalidRecordError):
        return False
    return True


def _latest_snapshot(directory: Path) -> tuple[int, Path] | None:
    latest = None
    for name in os.listdir(directory):
        if name.endswith(SNAPSHOT_SUFFIX + TMP_SUFFIX):  # a snapshot that never reached its rename
            unlink_if_exists(directory / name)
            continue
        match = _SNAPSHOT.match(name)
        if match and (latest is None or int(match["offset"]) > latest[0]):
            latest = (int(match["offset"]), directory / name)
    return latest


def _read_snapshot(path: Path) -> Iterator[MetadataRecord]:
    """The records of a snapshot; DamagedFileError when it is not a complete, undamaged one."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DamagedFileError(path, f"unreadable ({exc.strerror or exc})", _REMEDY) from exc
    records: list[MetadataRecord] = []
    complete = False
    position = 0
    for header in iter_headers(data):
        if header.position != position:
            break
        try:
            check_batch(data, header.position)
        except (CorruptRecordError, InvalidRecordError) as exc:
            raise DamagedFileError(path, f"the snapshot's batch at byte {header.position} is damaged ({exc})",
                                   _REMEDY) from None
        batch = memoryview(data)[header.position: header.position + header.size]
        for record in _batch_records(batch, path, header.base_offset):
            if isinstance(record, SnapshotFooterRecord):
                complete = True
            elif complete:
                raise DamagedFileError(path, "records after the snapshot's footer", _REMEDY)
            else:
                records.append(record)
        position += header.size
    if not complete or position != len(data):
        raise DamagedFileError(path, "an incomplete snapshot (no footer, or bytes after it)", _REMEDY)
    return iter(records)


def _read_quorum_epoch(path: Path) -> int:
    """The leader epoch `quorum-state` holds (0 when there is none yet)."""
    try:
        state = json.loads(path.read_bytes())
        epoch = state["leaderEpoch"]
        if type(epoch) is not int or epoch < 0:
            raise ValueError(f"leaderEpoch {epoch!r}")
        return epoch
    except FileNotFoundError:
        return 0
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DamagedFileError(path, f"unreadable quorum state ({exc})",
                               'restore it, or write {"leaderEpoch": N} with N at least the last epoch') from None


def _write_quorum_state(path: Path, leader_id: int, epoch: int, applied: int) -> None:
    state = {"clusterId": "", "leaderId": leader_id, "leaderEpoch": epoch, "votedId": -1,
             "appliedOffset": applied, "currentVoters": [{"voterId": leader_id}], "data_version": 0}
    write_atomically(path, json.dumps(state).encode() + b"\n")


def segment_file(directory: Path, base_offset: int) -> Path:
    return directory / (segment_name(base_offset) + ".log")
