"""Share sessions (KIP-932): which partitions each share consumer fetches, kept between its
ShareFetch requests as Kafka 4.4's ShareSessionCache / ShareSession / CachedSharePartition keep them.

A member opens its session with a ShareFetch at epoch 0 naming every partition it wants (a full
request: acknowledgements are refused in it), and the session's epoch becomes 1. Each later
ShareFetch or ShareAcknowledge carries the session's epoch, adds partitions and forgets others, and
moves the epoch on (wrapping from 2^31-1 to 1, Kafka's ShareRequestMetadata.nextEpoch). Epoch -1
closes the session: a final ShareFetch or ShareAcknowledge, after which the member's acquired
records are released. A connection that closes ends the sessions it opened the same way (Kafka's
ClientConnectionDisconnectListener).

Errors (Kafka's): SHARE_SESSION_NOT_FOUND (no session for the member, or epoch -1 without one),
INVALID_SHARE_SESSION_EPOCH (an epoch other than the session's; 0 on ShareAcknowledge),
SHARE_SESSION_LIMIT_REACHED (more than `group.share.max.share.sessions` sessions).

A subsequent fetch answers only the partitions that have records, an error, or are new in the
session (`must_respond`), as Kafka's ShareSessionContext does.

Pure: no trio, no clock.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import NamedTuple

from minibroker.protocol.errors import ErrorCode

__all__ = ["FINAL_EPOCH", "INITIAL_EPOCH", "ShareSession", "ShareSessionCache", "ShareSessionError", "SharePartitionId",
           "next_epoch"]

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1


def next_epoch(epoch: int) -> int:
    """Kafka's ShareRequestMetadata.nextEpoch."""
    if epoch < 0:
        return 0  # a final epoch is never followed
    return 1 if epoch == MAX_EPOCH else epoch + 1


class SharePartitionId(NamedTuple):
    topic_id: uuid.UUID
    topic: str | None  # None: an id no topic has (UNKNOWN_TOPIC_ID)
    partition: int


class ShareSessionError(Exception):
    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    connection_id: int
    epoch: int = 1
    # The partitions, in fetch order, each with whether the next response must carry it.
    partitions: dict[tuple[uuid.UUID, int], tuple[SharePartitionId, bool]] = field(default_factory=dict)

    def update(self, added: list[SharePartitionId], forgotten: list[tuple[uuid.UUID, int]]) -> None:
        for tp in added:
            key = (tp.topic_id, tp.partition)
            if key not in self.partitions:
                self.partitions[key] = (tp, True)  # a new partition is answered once even without data
        for key in forgotten:
            self.partitions.pop(key, None)

    def partition_list(self) -> list[SharePartitionId]:
        return [tp for tp, _ in self.partitions.values()]

    def must_respond(self, topic_id: uuid.UUID, partition: int, has_records: bool, error: bool) -> bool:
        """Kafka's CachedSharePartition.maybeUpdateResponseData: records, an error, or a partition
        new to the session; an error is answered again next time too. A partition that had records
        moves to the end of the fetch order."""
        key = (topic_id, partition)
        entry = self.partitions.get(key)
        if entry is None:
            return True
        tp, pending = entry
        respond = has_records or pending or error
        self.partitions[key] = (tp, error)
        if has_records:
            del self.partitions[key]
            self.partitions[key] = (tp, error)
        return respond


class ShareSessionCache:
    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self.by_connection: dict[int, set[tuple[str, str]]] = {}
        self.evictions = 0

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.get((group_id, member_id))

    def open(self, group_id: str, member_id: str, connection_id: int, partitions: list[SharePartitionId]) -> ShareSession:
        """A ShareFetch at epoch 0: any session of the member is replaced by a new one at epoch 1."""
        self.remove(group_id, member_id)
        if len(self.sessions) >= self.max_sessions:
            raise ShareSessionError(ErrorCode.share_session_limit_reached,
                                    "The limit of share sessions has been reached.")
        session = ShareSession(group_id, member_id, connection_id, next_epoch(INITIAL_EPOCH))
        session.partitions = {(tp.topic_id, tp.partition): (tp, False) for tp in partitions}
        self.sessions[(group_id, member_id)] = session
        self.by_connection.setdefault(connection_id, set()).add((group_id, member_id))
        return session

    def existing(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """The session a ShareFetch or ShareAcknowledge at `epoch` continues (or closes, at -1)."""
        session = self.get(group_id, member_id)
        if session is None:
            raise ShareSessionError(ErrorCode.share_session_not_found, "The share session was not found.")
        if epoch != FINAL_EPOCH and session.epoch != epoch:
            raise ShareSessionError(ErrorCode.invalid_share_session_epoch, "The share session epoch is invalid.")
        return session

    def advance(self, session: ShareSession) -> None:
        session.epoch = next_epoch(session.epoch)

    def remove(self, group_id: str, member_id: str) -> ShareSession | None:
        session = self.sessions.pop((group_id, member_id), None)
        if session is not None:
            keys = self.by_connection.get(session.connection_id)
            if keys is not None:
                keys.discard((group_id, member_id))
                if not keys:
                    del self.by_connection[session.connection_id]
        return session

    def connection_closed(self, connection_id: int) -> list[ShareSession]:
        """The sessions the connection opened, removed (their members' records are to be released)."""
        closed = []
        for group_id, member_id in sorted(self.by_connection.pop(connection_id, set())):
            session = self.sessions.pop((group_id, member_id), None)
            if session is not None:
                closed.append(session)
                self.evictions += 1
        return closed

    def members_of_group(self, group_id: str) -> int:
        return sum(1 for g, _ in self.sessions if g == group_id)
