"""What-if replay: each principal's Produce events through the project's own quota classes.

For every candidate `QuotaSettings`, a principal's Produce events go, in the broker's order (sorted
by `ts`, then `seq`), through a fresh `quotas.producer_id_quota.ProducerIdQuotaManager` and a
byte-rate `quotas.client_quota.ClientQuotaManager` (Produce), exactly as the broker calls them:

* `track(user, producer_id, ts, has_state)` for each event with `producer_id >= 0` (user = principal
  without "User:"), except those the broker refused before asking the quota (transactional batches,
  and batches held back behind a throttled earlier batch of their producer id).
  Known -> `pid_new` false; new and admitted -> true; new and rejected -> true with
  `pid_throttle_ms` > 0, and the PID is not recorded (the manager's own rule), so its retry is new
  again. Untracked (no quota for the user) -> null. `has_state` models the broker's producer state
  (the authority on known ids): the PIDs this replay has appended so far for the principal. Not
  modelled: producer state from before the trace, and its expiry (producer.id.expiration.ms).
* `record_and_get_throttle_time_ms(user, client_id, bytes, ts)` for each event: the byte-rate
  throttle after this event. A request's byte-rate throttle is that of its last event (recording is
  additive at one `ts`, so it equals recording the request's bytes at once). Approximate where the
  broker charges more than the record bytes: it records the whole request's size (headers and
  framing included), which the audit does not carry; the difference is small for real batches.

So replaying a broker's own audit under the broker's own settings reproduces its `pid_new` and
producer-id throttle decisions event for event (tests/test_pipeline_replay_live.py checks it).
Principals never share quota state (the PID quota is per user; byte-rate quotas at user or
user-default level have per-user sensors), so each principal replays on its own: in Spark, one
`groupBy("principal").applyInPandas` task per principal, all candidate settings in one pass.
`replay` returns every decision (tests, `--keep-decisions`); the report aggregates them inside the
same task instead (pipeline.whatif).

`appended` says whether the batch would have been appended under the candidate: not rejected by the
PID quota and, in the audit, either appended (error 0) or rejected only by the broker's own PID quota
(an invalid or out-of-sequence batch stays refused). Appended batches with a producer id are what the
producer-state model counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from quotas.callback import DEFAULT, ClientQuotaEntity
from quotas.client_quota import ClientQuotaManager, QuotaType
from quotas.config import QuotaConfigStore
from quotas.producer_id_quota import (
    DEFAULT_FALSE_POSITIVE_RATE,
    DEFAULT_LAYER_COUNT,
    DEFAULT_WINDOW_SIZE_SECONDS,
    ProducerIdQuotaManager,
)
from quotas.rate import MetricConfig
from storage.audit_format import API_PRODUCE, HELD_BY_PID_QUOTA, REFUSED_BEFORE_PID_QUOTA, user_of

__all__ = ["INPUT_COLUMNS", "QuotaSettings", "REPLAY_COLUMNS", "REPLAY_SCHEMA", "replay", "replay_principal"]

PRODUCE_KEY = API_PRODUCE[1]

REPLAY_SCHEMA = (
    "setting string, principal string, client_id string, seq long, ts long, topic string, "
    "partition int, producer_id long, bytes long, pid_new boolean, pid_throttle_ms int, "
    "byte_throttle_ms int, appended boolean"
)
REPLAY_COLUMNS = [part.strip().split(" ")[0] for part in REPLAY_SCHEMA.split(",")]
INPUT_COLUMNS = [
    "principal", "client_id", "seq", "ts", "topic", "partition", "producer_id", "bytes",
    "error_code", "throttle_quota",
]


@dataclass(frozen=True)
class QuotaSettings:
    """One candidate configuration. Rates: `producer_ids_rate` in new PIDs per
    `pid_window_size_seconds` (KIP-936 as implemented in quotas.producer_id_quota: fractions as the
    broker accepts them), `producer_byte_rate` in bytes per second; `None` = unlimited. The plain
    fields are the user default; `user_*` give per-user values, which win."""

    name: str
    producer_ids_rate: float | None = None
    user_producer_ids_rates: tuple[tuple[str, float], ...] = ()
    producer_byte_rate: float | None = None
    user_producer_byte_rates: tuple[tuple[str, float], ...] = ()
    pid_window_size_seconds: float = DEFAULT_WINDOW_SIZE_SECONDS  # producer.id.quota.window.size.seconds
    pid_layer_count: int = DEFAULT_LAYER_COUNT  # producer.id.quota.cache.layer.count
    false_positive_rate: float = DEFAULT_FALSE_POSITIVE_RATE
    quota_window_num: int = 11  # quota.window.num
    quota_window_size_seconds: float = 1.0  # quota.window.size.seconds

    @classmethod
    def from_quota_store(cls, name: str, text: str | bytes, **windows) -> QuotaSettings:
        """The user-level `producer_ids_rate` and `producer_byte_rate` of a broker's quota store
        (`client-quotas.json` in its data dir, quotas.config.QuotaConfigStore's format): replaying
        with these reproduces the broker's decisions, as far as the quotas were not altered during
        the audited period. Quotas on client ids are not replayed."""
        store = QuotaConfigStore.from_json(text)
        rates: dict[str, dict[str | None, float]] = {"producer_ids_rate": {}, "producer_byte_rate": {}}
        for entity, quotas in store.entities():
            if entity.user is None or entity.client_id is not None or entity.ip is not None:
                continue
            user = None if entity.user is DEFAULT else entity.user
            for key, per_user in rates.items():
                if key in quotas:
                    per_user[user] = quotas[key]
        pids, byte_rates = rates["producer_ids_rate"], rates["producer_byte_rate"]
        return cls(
            name,
            producer_ids_rate=pids.pop(None, None),
            user_producer_ids_rates=tuple(sorted(pids.items())),
            producer_byte_rate=byte_rates.pop(None, None),
            user_producer_byte_rates=tuple(sorted(byte_rates.items())),
            **windows,
        )

    def pid_rate_for(self, user: str) -> float | None:
        return dict(self.user_producer_ids_rates).get(user, self.producer_ids_rate)

    def pid_manager(self) -> ProducerIdQuotaManager:
        manager = ProducerIdQuotaManager(
            window_size_seconds=self.pid_window_size_seconds,
            layer_count=self.pid_layer_count,
            false_positive_rate=self.false_positive_rate,
        )
        if self.producer_ids_rate is not None:
            manager.update_quota(None, self.producer_ids_rate)
        for user, rate in self.user_producer_ids_rates:
            manager.update_quota(user, rate)
        return manager

    def byte_manager(self) -> ClientQuotaManager | None:
        if self.producer_byte_rate is None and not self.user_producer_byte_rates:
            return None
        manager = ClientQuotaManager(
            QuotaType.PRODUCE,
            metric_config=MetricConfig(
                samples=self.quota_window_num, window_ms=round(self.quota_window_size_seconds * 1000)
            ),
        )
        if self.producer_byte_rate is not None:
            manager.update_quota(ClientQuotaEntity.of(user=DEFAULT), self.producer_byte_rate)
        for user, rate in self.user_producer_byte_rates:
            manager.update_quota(ClientQuotaEntity.of(user=user), rate)
        return manager


def replay_principal(pdf: pd.DataFrame, settings: Sequence[QuotaSettings]) -> pd.DataFrame:
    """Replay one principal's Produce events (columns as `INPUT_COLUMNS`) under each setting.
    Plain pandas: Spark calls it per principal, tests call it directly."""
    if pdf.empty:
        return pd.DataFrame({c: [] for c in REPLAY_COLUMNS})
    pdf = pdf.sort_values(["ts", "seq"], kind="stable").reset_index(drop=True)
    n = len(pdf)
    principal = str(pdf["principal"].iat[0])
    user = user_of(principal)
    ts_list = pdf["ts"].astype("int64").tolist()
    # -1 where the broker does not ask the producer-id quota.
    pid_list = pdf["producer_id"].astype("int64").where(
        ~pdf["error_code"].isin(REFUSED_BEFORE_PID_QUOTA) & (pdf["throttle_quota"] != HELD_BY_PID_QUOTA), -1
    ).tolist()
    bytes_list = pdf["bytes"].astype("int64").tolist()
    client_list = pdf["client_id"].fillna("").astype(str).tolist()
    # Appended in the audit, or refused only by the broker's own producer-id quota.
    appendable = (pdf["error_code"].to_numpy() == 0) | (pdf["throttle_quota"].to_numpy() == "producer_ids_rate")
    frames = []
    for setting in settings:
        pid_new = np.full(n, -1, dtype=np.int8)  # -1 = null (not tracked)
        pid_throttle = np.zeros(n, dtype=np.int32)
        byte_throttle = np.zeros(n, dtype=np.int32)
        if setting.pid_rate_for(user) is not None:
            track = setting.pid_manager().track
            with_state: set[int] = set()  # the PIDs appended so far: the producer-state model
            for i in range(n):
                pid = pid_list[i]
                if pid >= 0:
                    result = track(user, pid, ts_list[i], lambda: pid in with_state)  # noqa: B023 (called at once)
                    if result.tracked:
                        pid_new[i] = 0 if result.known else 1
                        pid_throttle[i] = result.throttle_time_ms
                    if appendable[i] and result.throttle_time_ms == 0:
                        with_state.add(pid)
        byte_manager = setting.byte_manager()
        if byte_manager is not None:
            record = byte_manager.record_and_get_throttle_time_ms
            for i in range(n):
                byte_throttle[i] = record(user, client_list[i], bytes_list[i], ts_list[i])
        frame = pd.DataFrame({
            "setting": setting.name,
            "principal": principal,
            "client_id": client_list,
            "seq": pdf["seq"].astype("int64"),
            "ts": pdf["ts"].astype("int64"),
            "topic": pdf["topic"],
            "partition": pdf["partition"].astype("int32"),
            "producer_id": pdf["producer_id"].astype("int64"),
            "bytes": pdf["bytes"].astype("int64"),
            "pid_new": pd.array(np.where(pid_new < 0, None, pid_new == 1), dtype="boolean"),
            "pid_throttle_ms": pid_throttle,
            "byte_throttle_ms": byte_throttle,
            "appended": appendable & (pid_throttle == 0),
        })
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)[REPLAY_COLUMNS]


def replay(events: DataFrame, settings: Sequence[QuotaSettings]) -> DataFrame:
    """The replay decisions (`REPLAY_SCHEMA`): one row per Produce event per setting."""
    settings = tuple(settings)

    def replay_group(pdf):  # a plain function: Spark inspects its (absent) type hints
        return replay_principal(pdf, settings)

    produce = events.where(F.col("api_key") == PRODUCE_KEY).select(*INPUT_COLUMNS)
    return produce.groupBy("principal").applyInPandas(replay_group, schema=REPLAY_SCHEMA)
