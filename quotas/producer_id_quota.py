"""Producer-id quota (KIP-936): limit how many NEW producer ids each user introduces per window.

KIP-936 is still "Under Discussion" upstream and exists only as a prototype (Claudenw/kafka
`ProducerIDQuotaManagerCache`); this is a complete, clock-free version of it. Every method takes
`now_ms`; nothing here reads a clock, sleeps or starts a timer (the prototype's constructor-started
`Timer` is what the broker shell replaces by calling `cleanup(now_ms)`, at most every
`producer.id.quota.cache.cleanup.scheduler.interval.ms` and only when `next_cleanup_ms` says there is
something to drop; `on_change` tells it when that may have moved).

The contract (the KIP's reading: "User-A has producer_ids_rate 100 PID per 1hr ... the leader will
only store 100 PIDs in 1 hour and throttle any unseen PID"):

* `producer_ids_rate` R (a double, per user or user default only) is the number of new producer ids
  a user may introduce per window W = `producer.id.quota.window.size.seconds` (default 3600).
* Guarantee: in ANY interval of length W, at most floor(R) new ids of the user are admitted
  (R >= 1). A fraction below 1 stretches the window instead: R = 0.5 admits at most one new id in any
  interval of W / R = 2 W. In general the user's allowance over a lookback T is R * T / W ids, with
  T = W for R >= 1 and T = W / R (rounded up to the millisecond) below 1, and a new id is admitted
  only if the ids admitted in the last T, itself included, stay within that allowance: so 2.5 admits
  2 per W (ids are whole; the fraction still sizes the Bloom layers, R / layer count ids each), 0.5
  one per 2 W, 100 a hundred per W.
* How it is counted: admissions are counted per time slot of W / L (L =
  `producer.id.quota.cache.layer.count`), slots on a fixed grid (slot = floor(t * L / W)). A new id at
  t is admitted while the admissions in every slot that overlaps (t - T, t] number fewer than the
  allowance. That over-counts by at most one slot, never under-counts: every admission inside any
  interval of length T ending at t lies in such a slot, so the guarantee holds for every sliding
  interval (tests/quotas/test_pid_window.py proves it against a reference that keeps exact
  timestamps). The price: an admission stops counting between T and T + W / L after it was made.
  Memory per user: one [slot, count] pair per non-empty slot, at most L + 1 (one below R = 1).
* Throttle: a rejected id gets throttle_time_ms = the exact time until the slot count admits one
  again (the end of the oldest slot that must drop out of the lookback), at least 1 ms, at most
  2**31 - 1 (the protocol's int32). A rejected id is recorded nowhere: neither in the filter nor in
  the counts, so its retry after the throttle is judged afresh and admitted once a slot has freed.
* Known ids are never throttled. "Known" means the id has live producer state on this broker
  (the `has_state` callback the shell passes: the batch's own partition first, then any partition).
  Producer state, not the filter, is the authority, because it is what the quota protects and what
  survives a restart (snapshots plus log replay, also after kill -9); the Bloom filter is the KIP's
  per-user memory of the ids it saw, consulted first:
  - the filter holds the id and producer state confirms it: known (re-added to the newest layer
    when only older layers hold it, KIP-936 rejected alternative 8, so a long-lived producer is not
    forgotten when the layer that first saw it expires);
  - the filter does not hold it but producer state does (after a restart, or a producer silent for
    longer than the window): known, uncharged, and put back into the filter (`known-from-state`);
  - the filter holds it but no partition has state for it: a FALSE POSITIVE (or an id whose state
    expired or whose topic was deleted). It is counted (`false-positives`) and CHARGED like any new
    id: admitted if the window has room, else throttled. So a Bloom false positive never lets an id
    create producer state uncounted; the guarantee above has no false-positive allowance when the
    shell passes `has_state`. Without `has_state` (`None`, e.g. a replay with no producer-state
    model) the filter's word is taken: a false positive then passes as known, uncharged.
* The layered Bloom filter (quotas.bloom.LayeredBloomFilter), as the KIP draws it: per user, a new
  layer every W / L (or sooner when the newest layer is full), each removed once it is W old; layers
  are sized for ceil(R / L) ids (the prototype's rate / layer count), at least `min_layer_capacity`
  (32: the EnhancedDoubleHasher's k indexes collide in a filter of a few dozen bits, so smaller
  layers miss their false-positive rate by 2-10x) and at most `max_layer_capacity` (65,536 ids, 118 KB
  at p = 0.001: a huge rate must not allocate huge layers up front), with
  `producer.id.quota.cache.false.positive.rate` p per layer (Shape.fromNP, as the prototype). A user
  holds about L layers in steady state, so about L * p of unseen ids are claimed by some layer; with
  `has_state` those cost a producer-state lookup, nothing more. `max_layers_per_principal` (default
  4 * L) caps the layers of a user whose many long-lived producers keep refilling them: the oldest
  layer goes first, and its ids fall back on producer state (still known, never throttled).
* Scope: per user only, user default as fallback (KIP-936 has no client-id level). `principal` is
  the user name as used for the quota entity (`/config/users/<user>`), e.g. "alice" or "ANONYMOUS". A
  user with neither quota is unlimited and NOT tracked: no filter, no counts, no metrics, zero memory.
  A user is dropped by `cleanup` once it has no live layer and no admission still counted.
* Quota changes apply at once: the new allowance and lookback count the admissions already made;
  existing layers keep their shape, new layers take the new one.

Metrics per tracked user (`metrics(now_ms)`), after the KIP's ProducerIds group: `rate` (new ids
admitted in the last W: the quota's own unit, ids per window), `tokens` (new ids the user may still
introduce now; 0 while it is throttled), `throttle-time` (average of the throttle times returned
over the last W; NaN when there were none, as Kafka's Avg), `false-positives` (filter claims without
producer state, since the user was tracked), `known-from-state`, `estimated-fpp`, `memory-bytes`.
Broker-wide totals that never reset: `totals()`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from minibroker.quotas.bloom import ABSENT, HASH_SEED, OLDER, LayeredBloomFilter, Shape, _murmur, _pack_pid
from minibroker.quotas.rate import Avg, MetricConfig

__all__ = [
    "DEFAULT_FALSE_POSITIVE_RATE",
    "DEFAULT_LAYER_COUNT",
    "DEFAULT_MAX_LAYER_CAPACITY",
    "DEFAULT_MIN_LAYER_CAPACITY",
    "DEFAULT_WINDOW_SIZE_SECONDS",
    "MAX_THROTTLE_TIME_MS",
    "AdmissionWindow",
    "ProducerIdQuotaManager",
    "TrackResult",
    "allowance",
    "lookback_ms",
]

DEFAULT_WINDOW_SIZE_SECONDS = 3600  # producer.id.quota.window.size.seconds
DEFAULT_LAYER_COUNT = 4  # producer.id.quota.cache.layer.count (KIP-936's worked example)
DEFAULT_FALSE_POSITIVE_RATE = 0.001  # producer.id.quota.cache.false.positive.rate, per layer
DEFAULT_MIN_LAYER_CAPACITY = 32
DEFAULT_MAX_LAYER_CAPACITY = 1 << 16
MAX_THROTTLE_TIME_MS = 2**31 - 1  # throttle_time_ms is an int32 on the wire


def lookback_ms(rate: float, window_ms: int) -> int:
    """T: the span over which admissions count against `rate` (W, or W / rate below 1)."""
    # The slack keeps W / (W / T) from rounding up to T + 1 (minibroker.pipeline.model.needed_rate relies on it).
    return window_ms if rate >= 1.0 else math.ceil(window_ms / rate - 1e-9)


def allowance(rate: float) -> int:
    """Whole new ids admitted per lookback: floor(rate), and 1 for a rate below 1."""
    return math.floor(rate) if rate >= 1.0 else 1


class AdmissionWindow:
    """Admission counts per slot of W / L on a fixed grid, oldest first; only non-empty slots kept.

    Pure arithmetic on integer milliseconds (see the module docstring): `admit_or_wait` either
    records an admission at `now_ms` and returns 0, or records nothing and returns the wait in ms
    until one fits.
    """

    __slots__ = ("window_ms", "layer_count", "_slots")

    def __init__(self, window_ms: int, layer_count: int) -> None:
        self.window_ms = window_ms
        self.layer_count = layer_count
        self._slots: deque[list[int]] = deque()  # [slot index, admissions], ascending slot index

    def slot_of(self, t_ms: int) -> int:
        return t_ms * self.layer_count // self.window_ms

    def _slot_start_ms(self, slot: int) -> int:
        # The first millisecond t with slot_of(t) == slot: ceil(slot * W / L).
        return -(-slot * self.window_ms // self.layer_count)

    def _first_counted(self, now_ms: int, lookback: int) -> int:
        # Slots overlapping (now - T, now]: the integer ms in it start at now - T + 1.
        return self.slot_of(now_ms - lookback + 1)

    def count(self, now_ms: int, lookback: int) -> int:
        """Admissions in the slots that overlap (now - lookback, now]."""
        first = self._first_counted(now_ms, lookback)
        return sum(c for slot, c in self._slots if slot >= first)

    def drop_before(self, now_ms: int, lookback: int) -> None:
        """Forget the slots that no longer overlap the lookback ending at `now_ms`."""
        first = self._first_counted(now_ms, lookback)
        slots = self._slots
        while slots and slots[0][0] < first:
            slots.popleft()

    def admit_or_wait(self, now_ms: int, rate: float) -> int:
        lookback = lookback_ms(rate, self.window_ms)
        self.drop_before(now_ms, lookback)
        limit = allowance(rate)
        slots = self._slots
        counted = sum(c for _, c in slots)  # every kept slot overlaps the lookback now
        if counted < limit:
            slot = self.slot_of(now_ms)
            if slots and slots[-1][0] == slot:
                slots[-1][1] += 1
            elif slots and slots[-1][0] > slot:
                # The clock went back (wall time): count it in the newest slot, which keeps it
                # counted at least as long.
                slots[-1][1] += 1
            else:
                slots.append([slot, 1])
            return 0
        # The oldest slots must leave the lookback until fewer than `limit` admissions remain.
        excess = counted - limit + 1
        for slot, c in slots:
            excess -= c
            if excess <= 0:
                break
        # Slot `slot` stops counting when now - T + 1 reaches the start of slot + 1.
        admits_at = self._slot_start_ms(slot + 1) + lookback - 1
        return min(MAX_THROTTLE_TIME_MS, max(1, admits_at - now_ms))

    def is_empty(self, now_ms: int, lookback: int) -> bool:
        self.drop_before(now_ms, lookback)
        return not self._slots

    def next_drop_ms(self, lookback: int) -> int | None:
        """When `drop_before` next forgets a slot: the oldest stops counting once now - T + 1 reaches
        the start of the slot after it (None when there is none)."""
        if not self._slots:
            return None
        return self._slot_start_ms(self._slots[0][0] + 1) + lookback - 1

    def slots(self) -> list[tuple[int, int]]:
        return [(slot, c) for slot, c in self._slots]


@dataclass(frozen=True, slots=True)
class TrackResult:
    """known: the id has producer state (or, without `has_state`, the filter holds it): never
    throttled. throttle_time_ms > 0: a new id over the quota -- reject the batch with this throttle
    time. tracked: False for unlimited users. false_positive: the filter claimed the id but no
    producer state confirmed it (it was then charged as new)."""

    known: bool
    throttle_time_ms: int
    tracked: bool = True
    false_positive: bool = False

    @property
    def admitted(self) -> bool:
        return self.throttle_time_ms == 0


_UNTRACKED = TrackResult(known=False, throttle_time_ms=0, tracked=False)
_KNOWN = TrackResult(known=True, throttle_time_ms=0)
_ADMITTED = TrackResult(known=False, throttle_time_ms=0)
_ADMITTED_FP = TrackResult(known=False, throttle_time_ms=0, false_positive=True)


class _Entry:
    """One tracked user: its effective quota, id filter, admission counts and metric stats."""

    __slots__ = ("rate", "filter", "window", "throttle_times", "false_positives", "known_from_state")

    def __init__(self, rate: float, filter_: LayeredBloomFilter, window: AdmissionWindow, config: MetricConfig) -> None:
        self.rate = rate
        self.filter = filter_
        self.window = window
        self.throttle_times = Avg(config)
        self.false_positives = 0
        self.known_from_state = 0


class ProducerIdQuotaManager:
    """Per-user producer-id quota. See the module docstring for the contract.

    The broker shell calls `track` for each producer id in a Produce request (after authentication,
    before appending), `update_quota` when `producer_ids_rate` is altered, and `cleanup` so users who
    went quiet release their memory: at `next_cleanup_ms`, and no more often than every
    `producer.id.quota.cache.cleanup.scheduler.interval.ms`. `on_change`, when set, is called (with
    no arguments) whenever `next_cleanup_ms` may have become earlier: a user newly tracked, a rate
    changed.
    """

    on_change: Callable[[], None] | None

    def __init__(
        self,
        *,
        window_size_seconds: float = DEFAULT_WINDOW_SIZE_SECONDS,
        layer_count: int = DEFAULT_LAYER_COUNT,
        false_positive_rate: float = DEFAULT_FALSE_POSITIVE_RATE,
        max_layers_per_principal: int | None = None,
        min_layer_capacity: int = DEFAULT_MIN_LAYER_CAPACITY,
        max_layer_capacity: int = DEFAULT_MAX_LAYER_CAPACITY,
    ) -> None:
        if not (isinstance(window_size_seconds, (int, float)) and window_size_seconds > 0):
            raise ValueError(f"producer.id.quota.window.size.seconds must be > 0: {window_size_seconds}")
        self.window_ms = round(window_size_seconds * 1000)
        if self.window_ms < 1:
            raise ValueError(f"producer.id.quota.window.size.seconds too small: {window_size_seconds}")
        if not 1 <= layer_count <= self.window_ms:
            raise ValueError(
                f"producer.id.quota.cache.layer.count must be between 1 and the window in ms "
                f"({self.window_ms}): {layer_count}"
            )
        if not 0.0 < false_positive_rate < 1.0:
            raise ValueError(f"producer.id.quota.cache.false.positive.rate must be in (0, 1): {false_positive_rate}")
        if not 1 <= min_layer_capacity <= max_layer_capacity:
            raise ValueError(f"need 1 <= min_layer_capacity <= max_layer_capacity: {min_layer_capacity}, {max_layer_capacity}")
        self.layer_count = layer_count
        self.false_positive_rate = false_positive_rate
        self.min_layer_capacity = min_layer_capacity
        self.max_layer_capacity = max_layer_capacity
        self.max_layers_per_principal = (
            max_layers_per_principal if max_layers_per_principal is not None else 4 * layer_count
        )
        if self.max_layers_per_principal < 1:
            raise ValueError(f"max_layers_per_principal must be >= 1: {max_layers_per_principal}")
        # throttle-time averages over about one window: L samples of W / L.
        self._metric_config = MetricConfig(samples=layer_count, window_ms=max(1, self.window_ms // layer_count))
        self._user_quotas: dict[str, float] = {}
        self._default_quota: float | None = None
        self._entries: dict[str, _Entry] = {}
        # Broker-wide counters (never reset): admitted, rejected, false positives, known from state.
        self.admitted_total = 0
        self.rejected_total = 0
        self.false_positives_total = 0
        self.known_from_state_total = 0
        self.on_change = None

    # -- configuration -------------------------------------------------------------------------

    @property
    def window_size_ms(self) -> int:
        return self.window_ms

    def shape_for(self, rate: float) -> Shape:
        """The layer shape for a quota: ceil(rate / layer_count) ids, clamped to the capacities."""
        n = math.ceil(rate / self.layer_count - 1e-9)
        n = min(self.max_layer_capacity, max(self.min_layer_capacity, n))
        return Shape.from_np(n, self.false_positive_rate)

    def quota_for(self, user: str) -> float | None:
        """The effective `producer_ids_rate`: the user's own, else the user default, else None."""
        rate = self._user_quotas.get(user)
        return rate if rate is not None else self._default_quota

    def update_quota(self, user: str | None, producer_ids_rate: float | None) -> None:
        """Set (or with None remove) `producer_ids_rate` for `user`, or for the user default when
        `user` is None. Applies at once to every tracked user it affects."""
        if producer_ids_rate is not None:
            if not (math.isfinite(producer_ids_rate) and producer_ids_rate > 0):
                raise ValueError(f"producer_ids_rate must be a positive number: {producer_ids_rate}")
            producer_ids_rate = float(producer_ids_rate)
        if user is None:
            self._default_quota = producer_ids_rate
        elif producer_ids_rate is None:
            self._user_quotas.pop(user, None)
        else:
            self._user_quotas[user] = producer_ids_rate
        for name in list(self._entries):
            rate = self.quota_for(name)
            entry = self._entries[name]
            if rate is None:
                del self._entries[name]
            elif rate != entry.rate:
                entry.rate = rate
                entry.filter.set_shape(self.shape_for(rate))
        if self._entries and self.on_change is not None:
            self.on_change()  # a new lookback may let counts go sooner

    # -- the hot path --------------------------------------------------------------------------

    def track(self, principal: str, pid: int, now_ms: int,
              has_state: Callable[[], bool] | None = None) -> TrackResult:
        """Classify `pid` for user `principal` at `now_ms`: known, new and admitted (recorded and
        charged), or new and rejected with a throttle time (recorded nowhere). `has_state()` says
        whether the id has live producer state on the broker; it is called only for tracked users,
        at most once. Call `track` once per producer id in a request; batches without one (producer
        id -1) are not this quota's business."""
        entry = self._entries.get(principal)
        if entry is None:
            rate = self.quota_for(principal)
            if rate is None:
                return _UNTRACKED
            entry = self._new_entry(rate)
            self._entries[principal] = entry
            if self.on_change is not None:
                self.on_change()
        filter_ = entry.filter
        h1, h2 = _murmur(_pack_pid(pid), HASH_SEED)  # pid_hash, inlined on the hot path
        where = filter_.locate_hash(h1, h2, now_ms)
        false_positive = False
        if where != ABSENT:
            if has_state is None or has_state():
                if where == OLDER:
                    filter_.add_hash(h1, h2, now_ms)
                return _KNOWN
            false_positive = True
            entry.false_positives += 1
            self.false_positives_total += 1
        elif has_state is not None and has_state():
            filter_.add_hash(h1, h2, now_ms)
            entry.known_from_state += 1
            self.known_from_state_total += 1
            return _KNOWN
        throttle_time_ms = entry.window.admit_or_wait(now_ms, entry.rate)
        if throttle_time_ms:
            entry.throttle_times.record(throttle_time_ms, now_ms)
            self.rejected_total += 1
            return TrackResult(known=False, throttle_time_ms=throttle_time_ms, false_positive=false_positive)
        filter_.add_hash(h1, h2, now_ms)
        self.admitted_total += 1
        return _ADMITTED_FP if false_positive else _ADMITTED

    def _new_entry(self, rate: float) -> _Entry:
        filter_ = LayeredBloomFilter(
            self.shape_for(rate), self.layer_count, self.window_ms, max_layers=self.max_layers_per_principal,
        )
        return _Entry(rate, filter_, AdmissionWindow(self.window_ms, self.layer_count), self._metric_config)

    # -- housekeeping and introspection --------------------------------------------------------

    def cleanup(self, now_ms: int) -> None:
        """Drop expired layers and counts everywhere, and users with neither left."""
        for name in list(self._entries):
            entry = self._entries[name]
            counts_empty = entry.window.is_empty(now_ms, lookback_ms(entry.rate, self.window_ms))
            if entry.filter.is_empty(now_ms) and counts_empty:
                del self._entries[name]

    def next_cleanup_ms(self) -> int | None:
        """The earliest time at which `cleanup` has something to drop (a layer expiring, an admission
        leaving its lookback, and so perhaps a user), or None while no user is tracked. Until then a
        cleanup pass changes nothing, so a scheduler can sleep until this time instead of waking every
        interval; it must ask again after `on_change`."""
        dues: list[int] = []
        for entry in self._entries.values():
            expiry = entry.filter.next_expiry_ms()
            drop = entry.window.next_drop_ms(lookback_ms(entry.rate, self.window_ms))
            if expiry is None and drop is None:
                return 0  # a user with nothing left: its removal is due already
            dues.extend(t for t in (expiry, drop) if t is not None)
        return min(dues, default=None)

    def tracked_principals(self) -> list[str]:
        return list(self._entries)

    def is_tracked(self, principal: str) -> bool:
        return principal in self._entries

    def filter_for(self, principal: str) -> LayeredBloomFilter | None:
        entry = self._entries.get(principal)
        return entry.filter if entry is not None else None

    def window_for(self, principal: str) -> AdmissionWindow | None:
        entry = self._entries.get(principal)
        return entry.window if entry is not None else None

    def admitted_in_window(self, principal: str, now_ms: int) -> int:
        """New ids admitted in the slots overlapping the last W (the `rate` metric)."""
        entry = self._entries.get(principal)
        return entry.window.count(now_ms, self.window_ms) if entry is not None else 0

    def tokens(self, principal: str, now_ms: int) -> int | None:
        """New ids the user may still introduce at `now_ms` (0: new ids are throttled)."""
        entry = self._entries.get(principal)
        if entry is None:
            return None
        used = entry.window.count(now_ms, lookback_ms(entry.rate, self.window_ms))
        return max(0, allowance(entry.rate) - used)

    def memory_bytes(self, principal: str | None = None) -> int:
        """Bloom filter bytes of one tracked user (0 if untracked), or of all users."""
        if principal is not None:
            entry = self._entries.get(principal)
            return entry.filter.memory_bytes() if entry is not None else 0
        return sum(entry.filter.memory_bytes() for entry in self._entries.values())

    def totals(self) -> dict[str, int]:
        """Broker-wide counters since start: admitted, rejected, false positives, known from state."""
        return {
            "admitted": self.admitted_total,
            "rejected": self.rejected_total,
            "false-positives": self.false_positives_total,
            "known-from-state": self.known_from_state_total,
        }

    def metrics(self, now_ms: int) -> list[tuple[str, str, float]]:
        """(user, name, value) for each tracked user: rate, tokens, throttle-time, false-positives,
        known-from-state, estimated-fpp, memory-bytes."""
        out: list[tuple[str, str, float]] = []
        for name, entry in self._entries.items():
            out.append((name, "rate", float(self.admitted_in_window(name, now_ms))))
            out.append((name, "tokens", float(self.tokens(name, now_ms))))  # type: ignore[arg-type]
            out.append((name, "throttle-time", entry.throttle_times.measure(now_ms)))
            out.append((name, "false-positives", float(entry.false_positives)))
            out.append((name, "known-from-state", float(entry.known_from_state)))
            out.append((name, "estimated-fpp", entry.filter.estimated_fpp(now_ms)))
            out.append((name, "memory-bytes", float(entry.filter.memory_bytes())))
        return out
