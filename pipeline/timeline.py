"""The broker's quota configuration over time, from the quota-configuration events of its audit
(minibroker.storage.audit_format): what the replay of "the broker's quotas" applies, and the window settings
every candidate is measured with.

A `QuotaTimeline` is a list of `QuotaStep`s in stream order. A start step (the broker started) carries
the window settings (`WindowSettings`) and the whole user-level configuration, and means the broker's
quota managers began empty then; an AlterClientQuotas step carries the user-level values it changed.
The audit records an altered entity's whole configuration after the change, so a step keeps only the
keys whose value differs from what was in force before it (a key absent after the change was
removed only if it was set).
Only user-level entities (a user, or the user default) are replayed: `producer_ids_rate` exists only
there, and byte-rate quotas on client ids are not replayed (minibroker.pipeline.replay).

`complete` says whether the record starts with a start step: otherwise (retention removed it, or the
audit was written by a broker that did not record its quotas) the quotas in force before the first
recorded step are unknown, and the report says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Iterable

from minibroker.quotas.producer_id_quota import DEFAULT_FALSE_POSITIVE_RATE, DEFAULT_LAYER_COUNT, DEFAULT_WINDOW_SIZE_SECONDS
from minibroker.storage.audit_format import API_QUOTA_CONFIG

__all__ = ["QuotaStep", "QuotaTimeline", "REPLAYED_KEYS", "WindowSettings", "user_level"]

# The quota keys the replay applies (per user or the user default).
REPLAYED_KEYS = ("producer_ids_rate", "producer_byte_rate")

DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000


@dataclass(frozen=True)
class WindowSettings:
    """The broker settings quotas are measured with (storage.audit_format.QUOTA_SETTING_KEYS)."""

    pid_window_size_seconds: float = DEFAULT_WINDOW_SIZE_SECONDS  # producer.id.quota.window.size.seconds
    pid_layer_count: int = DEFAULT_LAYER_COUNT  # producer.id.quota.cache.layer.count
    false_positive_rate: float = DEFAULT_FALSE_POSITIVE_RATE  # producer.id.quota.cache.false.positive.rate
    quota_window_num: int = 11  # quota.window.num
    quota_window_size_seconds: float = 1.0  # quota.window.size.seconds
    producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS  # producer.id.expiration.ms

    KEYS = {
        "producer.id.quota.window.size.seconds": ("pid_window_size_seconds", float),
        "producer.id.quota.cache.layer.count": ("pid_layer_count", int),
        "producer.id.quota.cache.false.positive.rate": ("false_positive_rate", float),
        "quota.window.num": ("quota_window_num", int),
        "quota.window.size.seconds": ("quota_window_size_seconds", float),
        "producer.id.expiration.ms": ("producer_id_expiration_ms", int),
    }

    @classmethod
    def from_recorded(cls, recorded: dict[str, float] | None) -> WindowSettings:
        """From an event's `quota_settings` (missing or invalid keys keep the defaults)."""
        values: dict[str, Any] = {}
        for key, (name, kind) in cls.KEYS.items():
            value = (recorded or {}).get(key)
            if value is not None and math.isfinite(value) and value > 0:
                values[name] = kind(value)
        return cls(**values)

    def differences(self, other: WindowSettings) -> list[str]:
        """`key=this (other)` for each setting that differs, Kafka's names."""
        out = []
        for key, (name, _) in self.KEYS.items():
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine != theirs:
                out.append(f"{key}={mine:g} (recorded {theirs:g})")
        return out


def user_level(entity: dict) -> tuple[bool, str | None]:
    """(is a user-level entity, the user or None for the user default)."""
    if set(entity) != {"user"}:
        return False, None
    return True, entity["user"]


@dataclass(frozen=True)
class QuotaStep:
    """One recorded change at (ts, seq): `start` (with `windows` and the whole configuration in
    `quotas`) or an alteration (`quotas` = the values changed). `quotas`: ((user or None, key,
    value or None = removed), ...) for the REPLAYED_KEYS at user level."""

    ts: int
    seq: int
    start: bool
    windows: WindowSettings | None
    quotas: tuple[tuple[str | None, str, float | None], ...]
    principal: str = ""

    @property
    def key(self) -> tuple[int, int]:
        return (self.ts, self.seq)

    def for_user(self, user: str) -> QuotaStep | None:
        """This step as it concerns `user` (its own entity and the default); None if not at all."""
        quotas = tuple(q for q in self.quotas if q[0] is None or q[0] == user)
        if not self.start and not quotas:
            return None
        return replace(self, quotas=quotas)


@dataclass(frozen=True)
class QuotaTimeline:
    steps: tuple[QuotaStep, ...] = ()
    complete: bool = False  # the first step is a start: the quotas are known from the beginning
    notes: tuple[str, ...] = field(default=())

    @classmethod
    def from_records(cls, records: Iterable[dict]) -> QuotaTimeline:
        """From `minibroker.pipeline.read.quota_records` (dicts with ts, seq, api, principal, quotas,
        quota_settings), in stream order."""
        steps = []
        in_force: dict[tuple[str | None, str], float] = {}  # before the record's first step: none known
        for record in sorted(records, key=lambda r: (r["ts"], r["seq"])):
            start = record["api"] == API_QUOTA_CONFIG[0]
            if start:
                in_force = {}  # the broker's quota managers begin empty at a start
            quotas: list[tuple[str | None, str, float | None]] = []
            for entry in record.get("quotas") or []:
                ok, user = user_level(entry.get("entity") or {})
                if not ok:
                    continue
                values = entry.get("values") or {}
                for key in REPLAYED_KEYS:
                    value = float(values[key]) if values.get(key) is not None else None
                    if start and value is None:
                        continue
                    if not start and in_force.get((user, key)) == value:
                        continue  # recorded as it was: the alteration did not change this key
                    quotas.append((user, key, value))  # None: an alteration removed the key
                    if value is None:
                        in_force.pop((user, key), None)
                    else:
                        in_force[(user, key)] = value
            steps.append(QuotaStep(
                ts=int(record["ts"]), seq=int(record["seq"]), start=start,
                windows=WindowSettings.from_recorded(record.get("quota_settings")) if start else None,
                quotas=tuple(quotas), principal=record.get("principal") or "",
            ))
        notes = []
        complete = bool(steps) and steps[0].start
        if steps and not complete:
            notes.append("the audit's quota record begins with a change, not with the broker's start (retention "
                         "removed the start): the quotas before the first recorded change are unknown and "
                         "replayed as none")
        return cls(tuple(steps), complete, tuple(notes))

    @property
    def recorded(self) -> bool:
        return bool(self.steps)

    def first_windows(self) -> WindowSettings | None:
        """The window settings of the first recorded start, or None if none was recorded."""
        for step in self.steps:
            if step.start:
                return step.windows
        return None

    def window_settings(self) -> list[WindowSettings]:
        """Every distinct window setting recorded, in order."""
        out: list[WindowSettings] = []
        for step in self.steps:
            if step.start and step.windows not in out:
                out.append(step.windows)  # type: ignore[arg-type]
        return out

    def for_user(self, user: str) -> tuple[QuotaStep, ...]:
        return tuple(s for s in (step.for_user(user) for step in self.steps) if s is not None)

    def changes(self) -> list[QuotaStep]:
        """The alteration steps (not starts)."""
        return [s for s in self.steps if not s.start]

    def restarts(self) -> int:
        return sum(1 for s in self.steps if s.start)

    def final_quotas(self) -> dict[tuple[str | None, str], float]:
        """The user-level quotas in force at the end of the record."""
        state: dict[tuple[str | None, str], float] = {}
        for step in self.steps:
            if step.start:
                state = {}
            for user, key, value in step.quotas:
                if value is None:
                    state.pop((user, key), None)
                else:
                    state[(user, key)] = value
        return state
