"""Producer-id quota (KIP-936): throttle users who keep creating new producer ids.

KIP-936 is still "Under Discussion" upstream and exists only as a prototype (Claudenw/kafka
`ProducerIDQuotaManagerCache`); this is a complete, clock-free version of it. Every method takes
`now_ms`; nothing here reads a clock, sleeps, or starts a timer (the prototype's constructor-started
`Timer` is exactly what the broker shell replaces by calling `cleanup(now_ms)` periodically).

Decisions (the KIP leaves them open):

* Unit. `producer_ids_rate` is NEW PRODUCER IDS PER SECOND, like every Kafka `*_rate` quota and like
  `controller_mutation_rate`, which the KIP names as its model ("a rate within a period of time,
  similar to ControllerMutation quota"). A budget of Q new PIDs per hour is rate = Q / 3600. Fractions
  are fine (quota values are doubles in AlterClientQuotas).
* Window. `producer.id.quota.window.num` (default 11) samples of `producer.id.quota.window.size.seconds`
  (default 3600) each, as for Kafka's other quotas. Each sample window is one Bloom layer: the
  per-user `LayeredBloomFilter` has `window_num` layers, a new one every `window_size` (or sooner when
  the target layer is full), each living `window_num * window_size`. So a PID counted as new is not
  counted again inside the quota window, and a PID last seen at t stays known until at least
  t + (window_num - 1) * window_size.
* Shape. A layer is sized for the PIDs one sample window takes at the quota rate (the prototype's
  n = rate / layer_count, with its rate per whole window): n = max(32, ceil(rate * window_size_s)),
  p = `false_positive_rate`, default 0.001 PER LAYER (as the prototype's Shape.fromNP). A new PID is
  checked against every live layer, so with all 11 layers full about 1 - 0.999^11 = 1.1% of new PIDs
  are taken for known (they pass unthrottled, uncharged and unstored); p = 0.01 would let about 10%
  through, p = 0.0001 costs a third more memory and 13 hashes instead of 10. The floor
  (`min_layer_capacity`, 32) is there because the EnhancedDoubleHasher's k indexes collide in a filter
  of a few dozen bits: the measured FPR at n = 1..8 is 2-10x the formula, at n >= 16..32 it matches;
  a 32-PID layer at p = 0.001 has 461 bits (58 bytes).
* Time boundaries are half-open, as in Kafka's sampled stats: a layer created at t is live while
  now < t + window_num * window_size and gone AT that instant; the target rotates once
  now >= t + window_size. Layers start lazily at the first add due, not on a fixed grid.
* Throttle. A KIP-599 token bucket, as Kafka's ControllerMutation quota: burst B = window_num *
  window_size_s * rate, refilled at `rate` per second, capped at B; it starts full. Strict mode, as for
  controller mutations: a new PID is admitted while tokens >= 0 (so B + 1 PIDs pass from full) and
  then costs one token; at tokens < 0 it is rejected with throttle_time_ms = ceil(-tokens / rate * 1000):
  the exact wait after which a retry is admitted. (Kafka rounds; ceil means a client that waits exactly
  the returned time is not turned away again for half a millisecond.) Never 0 for a rejection.
* Rejected PIDs are NOT recorded: neither stored in the filter nor counted in the rate; a retry after
  the throttle is checked afresh. Storing them would let a PID storm fill memory, which the quota exists
  to prevent, and would wave the same PID through on retry without its token.
* Known PIDs are never throttled. A PID found only in older layers is re-added to the target layer
  (KIP-936 rejected alternative 8: otherwise a long-lived producer would be "new" again once the layer
  that first saw it expired); the re-add costs no token.
* Scope: per user only, user default as fallback (KIP-936 has no client-id level). `principal` is the
  user name as used for the quota entity (`/config/users/<user>`), e.g. "alice" or "ANONYMOUS". A user with
  neither quota is unlimited and NOT tracked: no filter, no bucket, no metrics, zero memory. Setting a
  quota to None (removal) that leaves a user unlimited drops its state at once.
* Quota changes apply live: the bucket takes the new rate and burst (tokens kept, capped at the new
  burst on the next refill); the filter keeps its layers and their shapes, and new layers use the
  new shape.
* Memory bound. New PIDs admitted in any window W = window_num * window_size are at most 2B + 1 (a
  full bucket plus W of refill), i.e. about 2 * window_num full layers; with the time-rotated layers
  that is <= 3 * window_num + 2 layers whatever the storm. Re-adds of long-lived PIDs also occupy
  layers, so `max_layers_per_principal` (default 4 * window_num) caps layers absolutely, dropping the
  oldest (its PIDs become "new" again: stricter, never looser). A user's entry is removed by `cleanup`
  once all its layers have expired and its bucket is full again (removing it earlier would hand out a
  fresh burst early).

Metrics per tracked user (`metrics(now_ms)`), after the KIP's ProducerIds sensor: `rate` (admitted new
PIDs per second: `quotas.rate.Rate` over the same samples), `tokens`, `throttle-time` (average of
the throttle times returned in the window; NaN when there were none, as Kafka's Avg), and the filter's
`estimated-fpp` and `memory-bytes`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from quotas.bloom import CURRENT, HASH_SEED, OLDER, LayeredBloomFilter, Shape, _murmur, _pack_pid
from quotas.rate import Avg, MetricConfig, Rate, TokenBucket

__all__ = [
    "DEFAULT_FALSE_POSITIVE_RATE",
    "DEFAULT_MIN_LAYER_CAPACITY",
    "DEFAULT_WINDOW_NUM",
    "DEFAULT_WINDOW_SIZE_SECONDS",
    "ProducerIdQuotaManager",
    "TrackResult",
]

DEFAULT_WINDOW_NUM = 11  # producer.id.quota.window.num
DEFAULT_WINDOW_SIZE_SECONDS = 3600  # producer.id.quota.window.size.seconds
DEFAULT_FALSE_POSITIVE_RATE = 0.001
DEFAULT_MIN_LAYER_CAPACITY = 32

# Float slack for the token arithmetic (refills are rate * elapsed / 1000).
_EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class TrackResult:
    """known: the PID was seen in the window (never throttled). throttle_time_ms > 0: a new PID over
    the quota -- reject the batch and report this throttle time. tracked: False for unlimited users."""

    known: bool
    throttle_time_ms: int
    tracked: bool = True

    @property
    def admitted(self) -> bool:
        return self.throttle_time_ms == 0


_UNTRACKED = TrackResult(known=False, throttle_time_ms=0, tracked=False)
_KNOWN = TrackResult(known=True, throttle_time_ms=0)
_ADMITTED = TrackResult(known=False, throttle_time_ms=0)


class _Entry:
    """One tracked user: its effective quota, PID filter, token bucket and metric stats."""

    __slots__ = ("rate", "filter", "bucket", "admitted", "throttle_times")

    def __init__(self, rate: float, filter_: LayeredBloomFilter, config: MetricConfig, now_ms: int) -> None:
        self.rate = rate
        self.filter = filter_
        # quotas.rate.TokenBucket starts empty at time 0 (Kafka's starts empty at the epoch, so it
        # is full at any real time): start it full at the user's first sighting instead.
        self.bucket = TokenBucket(config)
        self.bucket.tokens = config.samples * config.window_ms / 1000.0 * rate
        self.bucket.last_update_ms = now_ms
        self.admitted = Rate(config)
        self.throttle_times = Avg(config)

    def tokens(self, now_ms: int) -> float:
        return self.bucket.measure_with_quota(self.rate, now_ms)

    def try_take(self, now_ms: int) -> int:
        """0 and one token spent, or the ms until the balance is back at zero (nothing spent)."""
        tokens = self.tokens(now_ms)
        if tokens > -_EPSILON:
            self.bucket.record_with_quota(1.0, self.rate, now_ms)
            return 0
        return max(1, math.ceil(-tokens * 1000.0 / self.rate - 1e-6))

    def bucket_full(self, now_ms: int) -> bool:
        config = self.bucket.config
        burst = config.samples * config.window_ms / 1000.0 * self.rate
        return self.tokens(now_ms) >= burst - _EPSILON


class ProducerIdQuotaManager:
    """Per-user producer-id quota. See the module docstring for the semantics.

    The broker shell calls `track` for each producer id in a Produce request (after authentication,
    before appending), `update_quota` when `producer_ids_rate` is altered, and `cleanup` every so often
    (e.g. every window_size_seconds) so users who went quiet release their memory.
    """

    def __init__(
        self,
        *,
        window_num: int = DEFAULT_WINDOW_NUM,
        window_size_seconds: float = DEFAULT_WINDOW_SIZE_SECONDS,
        false_positive_rate: float = DEFAULT_FALSE_POSITIVE_RATE,
        max_layers_per_principal: int | None = None,
        min_layer_capacity: int = DEFAULT_MIN_LAYER_CAPACITY,
    ) -> None:
        if window_num < 1:
            raise ValueError(f"producer.id.quota.window.num must be >= 1: {window_num}")
        if not window_size_seconds > 0:
            raise ValueError(f"producer.id.quota.window.size.seconds must be > 0: {window_size_seconds}")
        if not 0.0 < false_positive_rate < 1.0:
            raise ValueError(f"false_positive_rate must be in (0, 1): {false_positive_rate}")
        self.window_num = window_num
        self.window_size_ms = round(window_size_seconds * 1000)
        if self.window_size_ms < 1:
            raise ValueError(f"producer.id.quota.window.size.seconds too small: {window_size_seconds}")
        self.false_positive_rate = false_positive_rate
        if min_layer_capacity < 1:
            raise ValueError(f"min_layer_capacity must be >= 1: {min_layer_capacity}")
        self.min_layer_capacity = min_layer_capacity
        self.max_layers_per_principal = (
            max_layers_per_principal if max_layers_per_principal is not None else 4 * window_num
        )
        if self.max_layers_per_principal < 1:
            raise ValueError(f"max_layers_per_principal must be >= 1: {max_layers_per_principal}")
        self._metric_config = MetricConfig(samples=window_num, window_ms=self.window_size_ms)
        self._user_quotas: dict[str, float] = {}
        self._default_quota: float | None = None
        self._entries: dict[str, _Entry] = {}

    # -- configuration -------------------------------------------------------------------------

    @property
    def window_ms(self) -> int:
        """How long a layer lives, and the span of the windowed rate: window_num * window_size."""
        return self.window_num * self.window_size_ms

    def shape_for(self, rate: float) -> Shape:
        """The layer shape for a quota: n = PIDs one sample window takes at `rate` (at least
        `min_layer_capacity`)."""
        n = max(self.min_layer_capacity, math.ceil(rate * self.window_size_ms / 1000.0 - 1e-9))
        return Shape.from_np(n, self.false_positive_rate)

    def burst_for(self, rate: float) -> float:
        return self.window_num * (self.window_size_ms / 1000.0) * rate

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
                # The bucket reads the quota on every call: refills from now on use the new rate,
                # capped at the new burst.
                entry.rate = rate
                entry.filter.set_shape(self.shape_for(rate))

    # -- the hot path --------------------------------------------------------------------------

    def track(self, principal: str, pid: int, now_ms: int) -> TrackResult:
        """Classify `pid` for user `principal` at `now_ms`: known, new and admitted (recorded), or new
        and rejected with a throttle time (not recorded). Call it once per producer id in a request;
        batches without one (producer id -1, not idempotent) are not this quota's business."""
        entry = self._entries.get(principal)
        if entry is None:
            rate = self.quota_for(principal)
            if rate is None:
                return _UNTRACKED
            entry = self._new_entry(rate, now_ms)
            self._entries[principal] = entry
        filter_ = entry.filter
        h1, h2 = _murmur(_pack_pid(pid), HASH_SEED)  # pid_hash, inlined on the hot path
        where = filter_.locate_hash(h1, h2, now_ms)
        if where == CURRENT:
            return _KNOWN
        if where == OLDER:
            filter_.add_hash(h1, h2, now_ms)
            return _KNOWN
        throttle_time_ms = entry.try_take(now_ms)
        if throttle_time_ms:
            entry.throttle_times.record(throttle_time_ms, now_ms)
            return TrackResult(known=False, throttle_time_ms=throttle_time_ms)
        filter_.add_hash(h1, h2, now_ms)
        entry.admitted.record(1.0, now_ms)
        return _ADMITTED

    def _new_entry(self, rate: float, now_ms: int) -> _Entry:
        filter_ = LayeredBloomFilter(
            self.shape_for(rate),
            self.window_num,
            self.window_ms,
            max_layers=self.max_layers_per_principal,
        )
        return _Entry(rate, filter_, self._metric_config, now_ms)

    # -- housekeeping and introspection --------------------------------------------------------

    def cleanup(self, now_ms: int) -> None:
        """Drop expired layers everywhere, and users with no live layer and a full bucket."""
        for name in list(self._entries):
            entry = self._entries[name]
            if entry.filter.is_empty(now_ms) and entry.bucket_full(now_ms):
                del self._entries[name]

    def tracked_principals(self) -> list[str]:
        return list(self._entries)

    def is_tracked(self, principal: str) -> bool:
        return principal in self._entries

    def filter_for(self, principal: str) -> LayeredBloomFilter | None:
        entry = self._entries.get(principal)
        return entry.filter if entry is not None else None

    def tokens(self, principal: str, now_ms: int) -> float | None:
        entry = self._entries.get(principal)
        return entry.tokens(now_ms) if entry is not None else None

    def memory_bytes(self, principal: str | None = None) -> int:
        """Bloom filter bytes of one tracked user (0 if untracked), or of all users."""
        if principal is not None:
            entry = self._entries.get(principal)
            return entry.filter.memory_bytes() if entry is not None else 0
        return sum(entry.filter.memory_bytes() for entry in self._entries.values())

    def metrics(self, now_ms: int) -> list[tuple[str, str, float]]:
        """(user, name, value) for each tracked user: rate, tokens, throttle-time, estimated-fpp,
        memory-bytes."""
        out: list[tuple[str, str, float]] = []
        for name, entry in self._entries.items():
            out.append((name, "rate", entry.admitted.measure(now_ms)))
            out.append((name, "tokens", entry.tokens(now_ms)))
            out.append((name, "throttle-time", entry.throttle_times.measure(now_ms)))
            out.append((name, "estimated-fpp", entry.filter.estimated_fpp(now_ms)))
            out.append((name, "memory-bytes", float(entry.filter.memory_bytes())))
        return out
