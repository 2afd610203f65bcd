"""What the storage layer raises when the data directory itself is the problem.

Two kinds, kept apart on purpose (docs/limits.md's rule: a damaged file stops the broker with a message
naming the file, or is recovered from what is on disk, never guessed around and deleted):

* `DamagedFileError`: a file the broker needs at start cannot be read or makes no sense. The broker
  refuses to start and the message names the file and what to do; nothing is deleted.
* `StrayDataError`: a partition directory holds records but no topic of the metadata log accounts
  for it (a directory brought in by hand, or of a topic whose metadata was lost). Nothing may be
  created over it: the request that would have done so is answered KAFKA_STORAGE_ERROR (56), the
  message naming the directory.

Plain `OSError`s from the file system (disk full, read-only, out of file descriptors) are not wrapped:
the request handlers answer them with KAFKA_STORAGE_ERROR per partition (see `storage_error_message`).
"""

from __future__ import annotations

from pathlib import Path

from minibroker.protocol.errors import ApiError, ErrorCode


class NotLeaderError(OSError):
    """An append to a replica that follows its leader (minibroker.replication): only the leader
    appends; a coordinator whose partition moved finds out here (its callers answer
    NOT_COORDINATOR, as they do for a failed append)."""


class NotEnoughReplicasError(OSError):
    """A coordinator's append refused before anything is written: the ISR of its partition is
    smaller than min.insync.replicas (Kafka's acks=-1 append answers NOT_ENOUGH_REPLICAS)."""


class DamagedFileError(ValueError):
    """A file in the data directory cannot be used as it is; `path` names it."""

    def __init__(self, path: Path | str, problem: str, remedy: str = "") -> None:
        self.path = Path(path)
        message = f"{self.path}: {problem}"
        if remedy:
            message += f"; {remedy}"
        super().__init__(message)


class FencedEpochError(ApiError):
    """A transactional batch the coordinator writes carries an older producer epoch than the
    partition's producer state: INVALID_PRODUCER_EPOCH (Kafka's ProducerAppendInfo.checkProducerEpoch,
    which checks the epoch, not the sequence, of a coordinator's append). Nothing was appended."""

    error_code = ErrorCode.invalid_producer_epoch


class StrayDataError(ApiError):
    """A directory holds records of a topic the registry does not know: KAFKA_STORAGE_ERROR."""

    error_code = ErrorCode.kafka_storage_error

    def __init__(self, directory: Path, topic: str) -> None:
        self.directory = directory
        super().__init__(
            f"{directory} holds records, but no topic of the metadata log accounts for it; move the "
            f"directory away before topic {topic!r} can be created"
        )


class TopicExistsError(ApiError):
    error_code = ErrorCode.topic_already_exists


class InvalidPartitionsError(ApiError, ValueError):
    error_code = ErrorCode.invalid_partitions


class UnknownTopicError(ApiError, KeyError):
    error_code = ErrorCode.unknown_topic_or_partition

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown topic"


class InvalidReplicationFactorError(ApiError, ValueError):
    error_code = ErrorCode.invalid_replication_factor


class InvalidReplicaAssignmentError(ApiError, ValueError):
    error_code = ErrorCode.invalid_replica_assignment


def storage_error_message(exc: OSError) -> str:
    """A one-line description of a file-system error for an error_message field and the log."""
    what = exc.strerror or exc.__class__.__name__
    where = f" ({exc.filename})" if exc.filename else ""
    return f"storage error: {what}{where}"
