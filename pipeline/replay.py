"""What-if replay: a user's Produce events through the project's own quota classes, under one
setting, resumable at any point (so a hot user's history can be split by time, minibroker.pipeline.whatif).

For a `QuotaSettings`, a user's Produce events go, in the broker's order (sorted by `ts`, then
`seq`), through `quotas.producer_id_quota.ProducerIdQuotaManager` and a byte-rate
`quotas.client_quota.ClientQuotaManager` (Produce), exactly as the broker calls them:

* `track(user, producer_id, ts, has_state)` for each event with `producer_id >= 0` (user = principal
  without "User:"), except those the broker refused before asking the quota (transactional batches,
  and batches held back behind a throttled earlier batch of their producer id).
  Known -> `pid_new` false; new and admitted -> true; new and rejected -> true with
  `pid_throttle_ms` > 0, and the PID is not recorded (the manager's own rule), so its retry is new
  again. Untracked (no quota for the user) -> null. `has_state` models the broker's producer state
  (the authority on known ids): the PIDs this replay has appended so far for the user. Not
  modelled: producer state from before the audit, and its expiry (producer.id.expiration.ms).
* `record_and_get_throttle_time_ms(user, client_id, bytes, ts)` for each event: the byte-rate
  throttle after this event. A request's byte-rate throttle is that of its last event (recording is
  additive at one `ts`, so it equals recording the request's bytes at once). Approximate where the
  broker charges more than the record bytes: it records the whole request's size (headers and
  framing included), which the audit does not carry; the difference is small for real batches.

The manager runs with a Bloom filter that holds nothing (`ReplayPidQuota`). With `has_state` given,
the filter never changes a decision: `track` answers known exactly when `has_state()` is true
(filter hit or miss), and charges the admission window otherwise (a miss, or a hit without state, a
false positive, which it charges too); the filter only remembers ids for the broker's memory and
counts false positives. Skipping it makes the replay 3-6x faster and keeps every decision
(tests/pipeline/test_pipeline_model.py compares both, and tests/pipeline/test_pipeline_replay_live.py the broker).

Quota changes (`QuotaSettings.recorded`: "the broker's quotas", minibroker.pipeline.timeline): the recorded
configuration is applied at its place in the stream, and at each recorded broker start the
managers begin empty with the window settings then recorded, as the broker's did (producer state,
the replay's `has_state`, survives a restart). Candidates keep their own quotas but restart with
the broker too, and use the recorded window settings unless they set their own.

So replaying a broker's own audit under the broker's recorded quotas reproduces its `pid_new` and
producer-id throttle decisions event for event. Users never share quota state (the PID quota is per
user; byte-rate quotas at user or user-default level have per-user sensors), so each (user,
setting) replays on its own (minibroker.pipeline.whatif runs them as separate Spark tasks).

`appended` says whether the batch would have been appended under the setting: not rejected by the
PID quota and, in the audit, either appended (error 0) or rejected only by the broker's own PID quota
(an invalid or out-of-sequence batch stays refused). Appended batches with a producer id are what the
producer-state model counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Sequence, cast

import numpy as np
import pandas as pd

from minibroker.pipeline.timeline import QuotaStep, QuotaTimeline, WindowSettings
from minibroker.quotas.bloom import ABSENT, LayeredBloomFilter
from minibroker.quotas.callback import DEFAULT, ClientQuotaEntity
from minibroker.quotas.client_quota import ClientQuotaManager, QuotaType
from minibroker.quotas.config import QuotaConfigStore
from minibroker.quotas.producer_id_quota import ProducerIdQuotaManager
from minibroker.quotas.rate import MetricConfig
from minibroker.storage.audit_format import API_PRODUCE, HELD_BY_PID_QUOTA, REFUSED_BEFORE_PID_QUOTA, user_of

__all__ = [
    "INPUT_COLUMNS",
    "PRODUCE_KEY",
    "QuotaSettings",
    "REPLAY_COLUMNS",
    "REPLAY_SCHEMA",
    "ReplayPidQuota",
    "UserEvents",
    "UserReplay",
    "replay",
    "replay_principal",
]

PRODUCE_KEY = API_PRODUCE[1]

REPLAY_SCHEMA = (
    "setting string, principal string, client_id string, seq long, ts long, topic string, "
    "partition int, producer_id long, bytes long, pid_new boolean, pid_throttle_ms int, "
    "byte_throttle_ms int, appended boolean"
)
REPLAY_COLUMNS = [part.strip().split(" ")[0] for part in REPLAY_SCHEMA.split(",")]
INPUT_COLUMNS = [
    "principal", "client_id", "seq", "ts", "topic", "partition", "producer_id", "bytes",
    "error_code", "throttle_quota", "pid_new", "throttle_time_ms",
]


@dataclass(frozen=True)
class QuotaSettings:
    """One setting to replay. Rates: `producer_ids_rate` in new PIDs per
    `pid_window_size_seconds` (KIP-936 as implemented in minibroker.quotas.producer_id_quota: fractions as the
    broker accepts them), `producer_byte_rate` in bytes per second; `None` = unlimited. The plain
    fields are the user default; `user_*` give per-user values, which win.

    Window fields left None take what the broker recorded (pipeline.timeline.WindowSettings; its
    defaults when nothing was recorded). `recorded`: "the broker's quotas": start from the recorded
    configuration and follow every recorded change (the rate fields are then ignored)."""

    name: str
    producer_ids_rate: float | None = None
    user_producer_ids_rates: tuple[tuple[str, float], ...] = ()
    producer_byte_rate: float | None = None
    user_producer_byte_rates: tuple[tuple[str, float], ...] = ()
    pid_window_size_seconds: float | None = None  # producer.id.quota.window.size.seconds
    pid_layer_count: int | None = None  # producer.id.quota.cache.layer.count
    false_positive_rate: float | None = None  # producer.id.quota.cache.false.positive.rate
    quota_window_num: int | None = None  # quota.window.num
    quota_window_size_seconds: float | None = None  # quota.window.size.seconds
    recorded: bool = False

    @classmethod
    def from_quota_store(cls, name: str, text: str | bytes, **windows) -> QuotaSettings:
        """The user-level `producer_ids_rate` and `producer_byte_rate` of a broker's quota store
        (`client-quotas.json` in its data dir, quotas.config.QuotaConfigStore's format): the quotas
        at the end, for an audit that did not record its quota configuration. Quotas on client ids
        are not replayed."""
        store = QuotaConfigStore.from_json(text)
        defaults: dict[str, float] = {}
        per_user: dict[str, dict[str, float]] = {"producer_ids_rate": {}, "producer_byte_rate": {}}
        for entity, quotas in store.entities():
            if entity.user is None or entity.client_id is not None or entity.ip is not None:
                continue
            for key, users in per_user.items():
                if key in quotas:
                    if entity.user is DEFAULT:
                        defaults[key] = quotas[key]
                    else:
                        users[entity.user] = quotas[key]
        return cls(
            name,
            producer_ids_rate=defaults.get("producer_ids_rate"),
            user_producer_ids_rates=tuple(sorted(per_user["producer_ids_rate"].items())),
            producer_byte_rate=defaults.get("producer_byte_rate"),
            user_producer_byte_rates=tuple(sorted(per_user["producer_byte_rate"].items())),
            **windows,
        )

    def pid_rate_for(self, user: str) -> float | None:
        return dict(self.user_producer_ids_rates).get(user, self.producer_ids_rate)

    def windows(self, recorded: WindowSettings | None = None) -> WindowSettings:
        """The window settings this setting replays with: its own where set, else `recorded`."""
        base = recorded or WindowSettings()
        own = {name: getattr(self, name) for name in (
            "pid_window_size_seconds", "pid_layer_count", "false_positive_rate", "quota_window_num",
            "quota_window_size_seconds") if getattr(self, name) is not None}
        return replace(base, **own)

    def static_quotas(self, user: str) -> dict[tuple[str | None, str], float]:
        """This setting's quotas as they concern `user`: {(user or None, key): value}."""
        out: dict[tuple[str | None, str], float] = {}
        for key, default, per_user in (
            ("producer_ids_rate", self.producer_ids_rate, self.user_producer_ids_rates),
            ("producer_byte_rate", self.producer_byte_rate, self.user_producer_byte_rates),
        ):
            if default is not None:
                out[(None, key)] = float(default)
            own = dict(per_user).get(user)
            if own is not None:
                out[(user, key)] = float(own)
        return out


# -- the quota classes, as the replay runs them ----------------------------------------------------


class _NoFilter:
    """A layered Bloom filter that remembers nothing (see the module docstring for why the replay
    may): every id is ABSENT, so `track` asks `has_state`."""

    __slots__ = ()

    def locate_hash(self, h1: int, h2: int, now_ms: int) -> int:
        return ABSENT

    def add_hash(self, h1: int, h2: int, now_ms: int) -> bool:
        return False

    def set_shape(self, shape) -> None:
        pass

    def is_empty(self, now_ms: int) -> bool:
        return True

    def memory_bytes(self) -> int:
        return 0

    def estimated_fpp(self, now_ms: int) -> float:
        return 0.0


class ReplayPidQuota(ProducerIdQuotaManager):
    """The broker's ProducerIdQuotaManager, every decision included, without the Bloom filter's memory."""

    def _new_entry(self, rate: float):
        entry = super()._new_entry(rate)
        entry.filter = cast(LayeredBloomFilter, _NoFilter())  # the methods the manager calls, remembering nothing
        return entry


# -- one user's events as arrays --------------------------------------------------------------------


@dataclass
class UserEvents:
    """One user's Produce events in the broker's order, as numpy arrays (what the replay and the
    aggregation read). `client` and `topic` are codes into `clients` / `topics`."""

    principal: str
    ts: np.ndarray  # int64
    seq: np.ndarray  # int64
    pid: np.ndarray  # int64, -1 = none
    trackable: np.ndarray  # bool: the broker asks the producer-id quota for it
    appendable: np.ndarray  # bool: appended, or refused only by the broker's own producer-id quota
    nbytes: np.ndarray  # int64
    client: np.ndarray  # int32 codes
    clients: list[str]
    topic: np.ndarray  # int32 codes (-1: null)
    topics: list[str]
    partition: np.ndarray  # int32
    audit_pid_new: np.ndarray  # int8: -1 null, 0, 1 (what the broker recorded)
    audit_pid_rejected: np.ndarray  # bool: the broker refused it for its producer-id quota

    def __len__(self) -> int:
        return len(self.ts)

    @classmethod
    def from_pandas(cls, pdf: pd.DataFrame) -> UserEvents:
        """From rows with INPUT_COLUMNS (one principal), in any order."""
        pdf = pdf.sort_values(["ts", "seq"], kind="stable")
        quota = pdf["throttle_quota"].fillna("").astype(str).to_numpy()
        error = pdf["error_code"].fillna(0).astype("int64").to_numpy()
        clients, client = _codes(pdf["client_id"].fillna("").astype(str).to_numpy())
        topics, topic = _codes(pdf["topic"].to_numpy(), nullable=True)
        pid_new = pdf["pid_new"] if "pid_new" in pdf else pd.Series([None] * len(pdf), dtype=object)
        untracked = pid_new.isna().to_numpy()
        return cls(
            principal=str(pdf["principal"].iat[0]) if len(pdf) else "",
            ts=pdf["ts"].astype("int64").to_numpy(),
            seq=pdf["seq"].astype("int64").to_numpy(),
            pid=pdf["producer_id"].fillna(-1).astype("int64").to_numpy(),
            trackable=~np.isin(error, list(REFUSED_BEFORE_PID_QUOTA)) & (quota != HELD_BY_PID_QUOTA),
            appendable=(error == 0) | (quota == "producer_ids_rate"),
            nbytes=pdf["bytes"].fillna(0).astype("int64").to_numpy(),
            client=client, clients=clients, topic=topic, topics=topics,
            partition=pdf["partition"].fillna(-1).astype("int32").to_numpy(),
            audit_pid_new=np.where(untracked, -1, pid_new.where(~untracked, False).astype(bool).to_numpy()).astype(np.int8),
            audit_pid_rejected=quota == "producer_ids_rate",
        )

    def slice(self, start: int, stop: int) -> UserEvents:
        arrays: dict[str, Any] = {name: value[start:stop] for name, value in self.__dict__.items()
                                  if isinstance(value, np.ndarray)}
        return replace(self, **arrays)


def _codes(values: np.ndarray, nullable: bool = False) -> tuple[list[str], np.ndarray]:
    """(distinct names, int32 code per value); None -> -1 when `nullable`."""
    if nullable:
        present = np.array([v is not None and v is not pd.NA for v in values], dtype=bool)
        names, codes = np.unique(values[present].astype(str), return_inverse=True) if present.any() else (
            np.array([], dtype=str), np.array([], dtype=np.int64))
        out = np.full(len(values), -1, dtype=np.int32)
        out[present] = codes
        return [str(n) for n in names], out
    names, codes = np.unique(values.astype(str), return_inverse=True)
    return [str(n) for n in names], codes.astype(np.int32)


@dataclass
class Decisions:
    pid_new: np.ndarray  # int8: -1 untracked, 0 known, 1 new
    pid_throttle_ms: np.ndarray  # int32
    byte_throttle_ms: np.ndarray  # int32
    appended: np.ndarray  # bool


# -- the replay ------------------------------------------------------------------------------------


@dataclass
class UserReplay:
    """One user under one setting, resumable: `run` a chunk of events, then pickle the object (its
    state: the managers, the replay's producer-state model, how far into the quota record it is) and
    `run` the next chunk elsewhere. `steps`: the recorded quota record as it concerns this user
    (pipeline.timeline.QuotaTimeline.for_user); `recorded_windows`: the window settings in force
    before its first start step."""

    user: str
    setting: QuotaSettings
    steps: tuple[QuotaStep, ...] = ()
    recorded_windows: WindowSettings | None = None
    with_state: set[int] = field(default_factory=set)
    next_step: int = 0
    quotas: dict = field(default_factory=dict)  # in force: {(user or None, key): value}
    pid: ReplayPidQuota | None = None
    bytes: ClientQuotaManager | None = None

    def __post_init__(self) -> None:
        if not self.setting.recorded:
            self.quotas = self.setting.static_quotas(self.user)
        self._restart(self.recorded_windows)

    # -- state changes -----------------------------------------------------------------------

    def _restart(self, windows: WindowSettings | None) -> None:
        """Fresh managers (a broker start), with the quotas in force."""
        w = self.setting.windows(windows)
        self.windows = w
        self.pid = ReplayPidQuota(window_size_seconds=w.pid_window_size_seconds, layer_count=w.pid_layer_count,
                                  false_positive_rate=w.false_positive_rate)
        self.bytes = None
        for (user, key), value in self.quotas.items():
            self._apply(user, key, value)

    def _apply(self, user: str | None, key: str, value: float | None) -> None:
        if key == "producer_ids_rate":
            self.pid.update_quota(user, value)  # type: ignore[union-attr]
        elif key == "producer_byte_rate":
            if self.bytes is None:
                if value is None:
                    return
                w = self.windows
                self.bytes = ClientQuotaManager(QuotaType.PRODUCE, metric_config=MetricConfig(
                    samples=w.quota_window_num, window_ms=round(w.quota_window_size_seconds * 1000)))
            self.bytes.apply_config_change(ClientQuotaEntity.of(user=DEFAULT if user is None else user), key, value)

    def _step(self, step: QuotaStep) -> None:
        if self.setting.recorded:
            if step.start:
                self.quotas = {}
            for user, key, value in step.quotas:
                if value is None:
                    self.quotas.pop((user, key), None)
                else:
                    self.quotas[(user, key)] = value
        if step.start:
            self._restart(step.windows)
        elif self.setting.recorded:
            for user, key, value in step.quotas:
                self._apply(user, key, value)

    def _ever_limited(self) -> bool:
        """Whether any quota can apply to this user at any point of the record (else: no work)."""
        if self.quotas:
            return True
        return self.setting.recorded and any(step.quotas for step in self.steps)

    # -- the events ---------------------------------------------------------------------------

    def run(self, events: UserEvents) -> Decisions:
        """Decide each event of `events` (which continue where the last `run` stopped)."""
        n = len(events)
        pid_new = np.full(n, -1, dtype=np.int8)
        pid_throttle = np.zeros(n, dtype=np.int32)
        byte_throttle = np.zeros(n, dtype=np.int32)
        appendable = events.appendable
        if n and self._ever_limited():
            user = self.user
            ts = events.ts.tolist()
            seq = events.seq.tolist()
            pids = np.where(events.trackable, events.pid, -1).tolist()
            nbytes = events.nbytes.tolist()
            client_names = events.clients
            clients = events.client.tolist()
            append_ok = appendable.tolist()
            with_state = self.with_state
            start = 0
            while start < n:
                # Apply the quota record up to the next event, then run to the next step.
                while self.next_step < len(self.steps) and self.steps[self.next_step].key < (ts[start], seq[start]):
                    self._step(self.steps[self.next_step])
                    self.next_step += 1
                stop = n
                if self.next_step < len(self.steps):
                    key = self.steps[self.next_step].key
                    stop = start + 1
                    while stop < n and (ts[stop], seq[stop]) < key:
                        stop += 1
                track = self.pid.track  # type: ignore[union-attr]
                for i in range(start, stop):
                    pid = pids[i]
                    if pid >= 0:
                        result = track(user, pid, ts[i], lambda: pid in with_state)  # noqa: B023 (called at once)
                        if result.tracked:
                            pid_new[i] = 0 if result.known else 1
                            if result.throttle_time_ms:
                                pid_throttle[i] = result.throttle_time_ms
                                continue
                        if append_ok[i]:
                            with_state.add(pid)
                if self.bytes is not None:
                    record = self.bytes.record_and_get_throttle_time_ms
                    for i in range(start, stop):
                        byte_throttle[i] = record(user, client_names[clients[i]], nbytes[i], ts[i])
                start = stop
        return Decisions(pid_new, pid_throttle, byte_throttle, appendable & (pid_throttle == 0))

    def finish(self) -> None:
        """Apply what is left of the quota record (nothing depends on it; for symmetry in tests)."""
        while self.next_step < len(self.steps):
            self._step(self.steps[self.next_step])
            self.next_step += 1

    def keep_only(self, pids: set[int]) -> None:
        """Forget the producer-state model's PIDs outside `pids` (those that never come back): what
        is carried to the next chunk."""
        self.with_state &= pids


def replay_user(events: UserEvents, setting: QuotaSettings, timeline: QuotaTimeline | None = None) -> Decisions:
    """The whole history of one user under one setting."""
    timeline = timeline or QuotaTimeline()
    user = user_of(events.principal)
    return UserReplay(user, setting, timeline.for_user(user), _windows_before(timeline)).run(events)


def _windows_before(timeline: QuotaTimeline) -> WindowSettings | None:
    """The window settings before the first recorded start: that start's (the broker ran with them
    then too, as far as anyone can tell)."""
    return timeline.first_windows()


def replay_principal(pdf: pd.DataFrame, settings: Sequence[QuotaSettings],
                     timeline: QuotaTimeline | None = None) -> pd.DataFrame:
    """Every decision for one principal's Produce events (columns as `INPUT_COLUMNS`) under each
    setting, as a REPLAY_COLUMNS frame. Plain pandas: tests call it directly, `replay` per principal."""
    if pdf.empty:
        return pd.DataFrame({c: [] for c in REPLAY_COLUMNS})
    events = UserEvents.from_pandas(pdf)
    frames = []
    for setting in settings:
        d = replay_user(events, setting, timeline)
        frames.append(pd.DataFrame({
            "setting": setting.name,
            "principal": events.principal,
            "client_id": [events.clients[c] for c in events.client],
            "seq": events.seq,
            "ts": events.ts,
            "topic": [events.topics[t] if t >= 0 else None for t in events.topic],
            "partition": events.partition,
            "producer_id": events.pid,
            "bytes": events.nbytes,
            "pid_new": pd.array(np.where(d.pid_new < 0, None, d.pid_new == 1), dtype="boolean"),
            "pid_throttle_ms": d.pid_throttle_ms,
            "byte_throttle_ms": d.byte_throttle_ms,
            "appended": d.appended,
        }))
    return pd.concat(frames, ignore_index=True)[REPLAY_COLUMNS]


def replay(events, settings: Sequence[QuotaSettings], timeline: QuotaTimeline | None = None):
    """The replay decisions (`REPLAY_SCHEMA`) as a Spark DataFrame: one row per Produce event per
    setting (tests, `--keep-decisions`; the report aggregates in the tasks instead, minibroker.pipeline.whatif)."""
    from pyspark.sql import functions as F

    settings = tuple(settings)

    def replay_group(pdf):  # a plain function: Spark inspects its (absent) type hints
        return replay_principal(pdf, settings, timeline)

    produce = events.where(F.col("api_key") == PRODUCE_KEY).select(*INPUT_COLUMNS)
    return produce.groupBy("principal").applyInPandas(replay_group, schema=REPLAY_SCHEMA)
