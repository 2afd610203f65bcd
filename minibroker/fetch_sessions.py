"""Incremental fetch sessions (KIP-227; Kafka's FetchSession.scala: FetchManager, FetchSessionCache,
CachedPartition, the Full/Incremental/Sessionless/SessionError fetch contexts).

A consumer's fetch names every partition it reads once (a full fetch, epoch 0), and the broker
answers a session id; after that each fetch names only the partitions whose fetch position or size
changed (an incremental fetch, the session's next epoch, 1, 2, ... wrapping to 1), plus the
partitions to forget, and the response carries only the partitions with something new: records, a
changed high watermark or log start offset, or an error. With a thousand partitions and little
traffic, both directions shrink from all partitions to the few that moved.

The request's (session_id, session_epoch), as FetchMetadata reads them:
- (0, -1): a sessionless full fetch (every client before v7, and any client that wants no session).
- (0, 0): a full fetch that asks for a session: one is created when the cache has a slot (else the
  answer's session id is 0 and the client goes on with full fetches).
- (id, 0): the session `id` is closed and a new one created; (id, -1): it is closed, no new one.
- (id, epoch > 0): incremental. An unknown id is FETCH_SESSION_ID_NOT_FOUND, an epoch other than
  the session's INVALID_FETCH_SESSION_EPOCH, a session made with topic ids asked without them (or
  the other way round) FETCH_SESSION_TOPIC_ID_ERROR: top-level errors, no partitions, session id 0,
  after which the client starts over with a full fetch. An incremental fetch that leaves the session
  empty closes it and is answered sessionless.

The cache (Kafka's FetchSessionCache): at most `max.incremental.fetch.session.cache.slots` sessions
(Kafka's default 1000; 0 turns sessions off). A new session takes a free slot; else it may evict a
session unused for `min.incremental.fetch.session.eviction.ms` (120 s), else the least valuable
evictable one: a session is evictable by an ordinary client only once it is older than that
eviction time, and only by a smaller one (ordered by privileged-ness, then size in partitions, then
id); a privileged session (a follower's, replica_id >= 0) may evict any unprivileged one. Partitions
that returned records move to the end of the session's order (Kafka's fairness among partitions
under fetch.max.bytes).

A response a client quota throttles is answered empty (minibroker.handlers.fetch.empty_response):
what it would have carried is then not counted as sent (the new session is dropped, or the
partitions it would have carried are sent at the next fetch), as Kafka's getThrottledResponse
leaves the session untouched.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from minibroker.protocol.errors import ErrorCode

__all__ = ["FetchContext", "FetchSession", "FetchSessionCache", "FetchSessions", "INVALID_SESSION_ID"]

INVALID_SESSION_ID = 0
MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS = 120_000  # Kafka's constant of the same name
INITIAL_EPOCH = 0
FINAL_EPOCH = -1

# (topic name or topic id, partition): a session keys its partitions by topic id from Fetch v13.
PartitionKey = tuple[Any, int]
# What a fetch reads for one partition: (topic name or None, topic id or None, partition, fetch
# offset, partition max bytes), as _FetchPlan takes it.
Wanted = tuple[str | None, uuid.UUID | None, int, int, int]


def next_epoch(epoch: int) -> int:
    """FetchMetadata.nextEpoch: 1, 2, ... Integer.MAX_VALUE, then 1 again (0 and -1 are special)."""
    return 1 if epoch < 0 or epoch >= 0x7FFFFFFF else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    topic: str | None
    topic_id: uuid.UUID | None
    partition: int
    fetch_offset: int
    max_bytes: int
    high_watermark: int = -1  # the last ones sent: a change is sent again
    log_start_offset: int = -1

    def must_respond(self, data: dict[str, Any], update: bool) -> bool:
        """Kafka's CachedPartition.maybeUpdateResponseData: records, a changed high watermark or log
        start offset, or an error (the high watermark is then forgotten, so the partition is sent
        again once the error is gone)."""
        respond = bool(data.get("records"))
        if data["high_watermark"] != self.high_watermark:
            respond = True
            if update:
                self.high_watermark = data["high_watermark"]
        if data["log_start_offset"] != self.log_start_offset:
            respond = True
            if update:
                self.log_start_offset = data["log_start_offset"]
        if data["error_code"]:
            respond = True
            if update:
                self.high_watermark = -1
        return respond


@dataclass(eq=False)
class FetchSession:
    id: int
    privileged: bool
    uses_topic_ids: bool
    creation_ms: int
    partitions: dict[PartitionKey, CachedPartition]
    last_used_ms: int = 0
    epoch: int = 1  # the epoch the next incremental fetch must carry
    cached_size: int = -1  # the size the cache accounted it at

    @property
    def size(self) -> int:
        return len(self.partitions)

    def evictable_key(self) -> tuple[bool, int, int]:
        return (self.privileged, self.cached_size, self.id)

    def update(self, wanted: Iterable[tuple[PartitionKey, CachedPartition]], forget: Iterable[PartitionKey]) -> None:
        """An incremental fetch's partitions: added, or their position and size updated; then the
        forgotten ones removed (Kafka's FetchSession.update)."""
        for key, cached in wanted:
            known = self.partitions.get(key)
            if known is None:
                self.partitions[key] = cached
            else:
                known.fetch_offset, known.max_bytes = cached.fetch_offset, cached.max_bytes
        for key in forget:
            self.partitions.pop(key, None)


class FetchSessionCache:
    """Kafka's FetchSessionCache (one shard): sessions by id, with its eviction rules."""

    def __init__(self, max_entries: int, eviction_ms: int, rng: random.Random | None = None) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.sessions: dict[int, FetchSession] = {}
        self.rng = rng or random.Random()
        self.partitions = 0  # cached partitions over all sessions (Kafka's NumIncrementalFetchPartitionsCached)
        self.evictions = 0
        self.created = 0

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        session = self.sessions.pop(session_id, None)
        if session is not None and session.cached_size >= 0:
            self.partitions -= session.cached_size
        return session

    def touch(self, session: FetchSession, now_ms: int) -> None:
        session.last_used_ms = now_ms
        if session.cached_size >= 0:
            self.partitions -= session.cached_size
        session.cached_size = session.size
        self.partitions += session.cached_size

    def _evictable(self, session: FetchSession, now_ms: int, privileged: bool) -> bool:
        """Kafka's evictableByAll / evictableByPrivileged maps, as touch() fills them."""
        old = now_ms - session.creation_ms > self.eviction_ms
        return old or (privileged and not session.privileged)

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        if not self.sessions:
            return False
        stalest = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - stalest.last_used_ms > self.eviction_ms:
            self.remove(stalest.id)
            self.evictions += 1
            return True
        candidates = [s for s in self.sessions.values() if self._evictable(s, now_ms, privileged)]
        if not candidates:
            return False
        weakest = min(candidates, key=FetchSession.evictable_key)
        if (privileged, size, 0) < weakest.evictable_key():
            return False
        self.remove(weakest.id)
        self.evictions += 1
        return True

    def maybe_create(self, now_ms: int, privileged: bool, uses_topic_ids: bool,
                     partitions: dict[PartitionKey, CachedPartition]) -> FetchSession | None:
        """A new session when a slot is free or can be freed (Kafka's maybeCreateSession), else None."""
        if self.max_entries <= 0:
            return None
        if len(self.sessions) >= self.max_entries and not self._try_evict(privileged, len(partitions), now_ms):
            return None
        session_id = INVALID_SESSION_ID
        while session_id == INVALID_SESSION_ID or session_id in self.sessions:
            session_id = self.rng.randint(1, 0x7FFFFFFF)
        session = FetchSession(session_id, privileged, uses_topic_ids, now_ms, partitions)
        self.sessions[session_id] = session
        self.touch(session, now_ms)
        self.created += 1
        return session


@dataclass
class FetchContext:
    """What one Fetch is, once its session fields are read: the partitions to read (`wanted`, in
    order), and `finish`, which turns the read partitions into the response's (session id,
    responses, what to undo if the response is discarded by a quota throttle)."""

    wanted: list[Wanted]
    error: ErrorCode = ErrorCode.none
    session: FetchSession | None = None  # incremental
    new_session: Callable[[list[dict[str, Any]]], FetchSession | None] | None = None  # full, asking for one
    order: list[CachedPartition] = field(default_factory=list)  # incremental: the session's partitions read
    cache: FetchSessionCache | None = None

    def quiet(self, index: int, log: Any) -> bool:
        """Whether the `index`th partition to read (incremental only) has nothing to answer: read
        up to its end and its high watermark and log start offset sent already. Reading it would
        find nothing that must be answered (CachedPartition.must_respond), so it is not read: the
        broker's work per incremental fetch follows what moved, not the session's size."""
        if self.session is None:
            return False
        cached = self.order[index]
        end = log.high_watermark  # what a consumer reads up to
        return cached.fetch_offset == end == cached.high_watermark and cached.log_start_offset == log.log_start_offset

    def finish(self, responses: list[dict[str, Any]]) -> tuple[int, list[dict[str, Any]], Callable[[], int] | None]:
        """(the response's session id, its partitions, `on_discard`: what undoes the session's
        bookkeeping when a quota throttle discards the response, answering the session id the
        empty response carries; None when there is nothing to undo)."""
        if self.new_session is not None:
            session = self.new_session(responses)
            if session is None:
                return INVALID_SESSION_ID, responses, None
            cache = self.cache

            def drop() -> int:  # Kafka's FullFetchContext.getThrottledResponse: no session
                if cache is not None:
                    cache.remove(session.id)
                return INVALID_SESSION_ID
            return session.id, responses, drop
        if self.session is None:
            return INVALID_SESSION_ID, responses, None
        return self._incremental(responses)

    def _incremental(self, responses: list[dict[str, Any]]):
        session = self.session
        assert session is not None
        by_key = {_key(session.uses_topic_ids, topic["topic"], topic["topic_id"], p["partition_index"]): (topic, p)
                  for topic in responses for p in topic["partitions"]}
        kept: dict[Any, dict[str, Any]] = {}
        sent: list[CachedPartition] = []
        for cached in self.order:
            key = _key(session.uses_topic_ids, cached.topic, cached.topic_id, cached.partition)
            found = by_key.get(key)
            if found is None:
                continue
            topic, data = found
            if not cached.must_respond(data, True):
                continue
            sent.append(cached)
            if data.get("records"):  # Kafka's fairness: a partition that returned data goes last
                session.partitions.pop(key, None)
                session.partitions[key] = cached
            entry = kept.get((topic["topic"], topic["topic_id"]))
            if entry is None:
                entry = kept[(topic["topic"], topic["topic_id"])] = {**topic, "partitions": []}
            entry["partitions"].append(data)

        def resend() -> int:  # what was not sent is sent at the next fetch
            for cached in sent:
                cached.high_watermark = -1
            return session.id
        return session.id, list(kept.values()), resend if sent else None


def _key(uses_topic_ids: bool, name: str | None, topic_id: uuid.UUID | None, partition: int) -> PartitionKey:
    return (topic_id if uses_topic_ids else name, partition)


class FetchSessions:
    """Kafka's FetchManager.newContext over a FetchSessionCache."""

    def __init__(self, cache: FetchSessionCache) -> None:
        self.cache = cache
        self.incremental_fetches = 0  # answered from a session (for metrics and tests)
        self.session_errors = 0

    def new_context(self, request: Any, version: int, now_ms: int, privileged: bool = False) -> FetchContext:
        session_id = getattr(request, "session_id", INVALID_SESSION_ID)
        epoch = getattr(request, "session_epoch", FINAL_EPOCH)
        uses_topic_ids = version >= 13
        wanted: list[Wanted] = []
        cached_parts: list[tuple[PartitionKey, CachedPartition]] = []
        for topic in request.topics:
            name = getattr(topic, "topic", None)
            topic_id = getattr(topic, "topic_id", None)
            for p in topic.partitions:
                wanted.append((name, topic_id, p.partition, p.fetch_offset, p.partition_max_bytes))
                cached_parts.append((_key(uses_topic_ids, name, topic_id, p.partition),
                                     CachedPartition(name, topic_id, p.partition, p.fetch_offset, p.partition_max_bytes)))
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # a full fetch
            if session_id != INVALID_SESSION_ID:
                self.cache.remove(session_id)
            if epoch == FINAL_EPOCH or self.cache.max_entries <= 0:
                return FetchContext(wanted)

            def create(responses: list[dict[str, Any]]) -> FetchSession | None:
                partitions = dict(cached_parts)
                for topic in responses:
                    for data in topic["partitions"]:
                        cached = partitions.get(_key(uses_topic_ids, topic["topic"], topic["topic_id"],
                                                     data["partition_index"]))
                        if cached is not None:
                            cached.must_respond(data, True)
                return self.cache.maybe_create(now_ms, privileged, uses_topic_ids, partitions)

            return FetchContext(wanted, new_session=create, cache=self.cache)
        session = self.cache.get(session_id)
        error = ErrorCode.none
        if session is None:
            error = ErrorCode.fetch_session_id_not_found
        elif session.epoch != epoch:
            error = ErrorCode.invalid_fetch_session_epoch
        elif session.uses_topic_ids != uses_topic_ids:
            error = ErrorCode.fetch_session_topic_id_error
        if session is None or error:
            self.session_errors += 1
            return FetchContext([], error)
        self.incremental_fetches += 1
        forget = [_key(uses_topic_ids, getattr(t, "topic", None), getattr(t, "topic_id", None), p)
                  for t in getattr(request, "forgotten_topics_data", ()) for p in t.partitions]
        session.update(cached_parts, forget)
        if not session.partitions:
            self.cache.remove(session.id)
            return FetchContext(wanted)
        self.cache.touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        order = list(session.partitions.values())
        return FetchContext([(c.topic, c.topic_id, c.partition, c.fetch_offset, c.max_bytes) for c in order],
                            session=session, order=order)
