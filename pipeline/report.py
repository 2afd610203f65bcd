"""Run the jobs and write the report: Parquet tables, PNG plots (matplotlib, Agg) and `index.html`.

The page's first lines answer the question the pipeline exists for: "a default producer_ids_rate
of X throttles only carol (N batches); Y throttles nobody" (minibroker.pipeline.recommend picks X and Y, the
replay counts what they do). Then everything a reader needs: what was read, the broker's quota
configuration as recorded (and any disagreement with the flags given), what each setting would have
done beside what the broker did ("observed"), per user, and three plots, each with a sentence saying
how to read it. Tables (Parquet, one directory each, readable by Spark, pandas, DuckDB ...):

* `summary/`: per window, principal and client id (minibroker.pipeline.jobs.summary);
* `new_pids_per_window/`: the producer-id quota's demand per principal and window;
* `replay_decisions/` (only with `--keep-decisions`): one row per Produce event per setting;
* `replay_windows/`, `replay_totals.parquet`: the what-if replay, per window and in total (with the
  "observed" rows: what the broker decided);
* `state_over_time/`: producer-state entries and bytes, lean vs kafka, per setting;
* `user_needs.parquet`: per principal, the producer_ids_rate it needs.

`build_report` reports each stage's counts and time through `progress` as it goes.

The report says what is missing rather than answering without it: an audit whose decisions are all
by User:ANONYMOUS (PLAINTEXT clients) gets a line saying that per-user answers need authenticated
users; a user with a single producer id needs "any (1)" rate; throttle times read in ms, s, min or h;
the report's window is picked from the audit's length (`pick_window_ms`) unless one is given.
"""

from __future__ import annotations

import html
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.ticker  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from pyspark import StorageLevel  # noqa: E402
from pyspark.sql import DataFrame  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from minibroker.pipeline import jobs  # noqa: E402
from minibroker.pipeline.model import StateMemoryModel  # noqa: E402
from minibroker.pipeline.read import decision_events, is_audit_event, is_quota_config, quota_records  # noqa: E402
from minibroker.pipeline.recommend import Answer, answer  # noqa: E402
from minibroker.pipeline.replay import QuotaSettings, replay  # noqa: E402
from minibroker.pipeline.timeline import QuotaTimeline, WindowSettings  # noqa: E402
from minibroker.pipeline.whatif import COUNTS, state_table, totals_table, whatif, windows_table  # noqa: E402

__all__ = ["OBSERVED", "ReportResult", "build_report", "candidate", "duration_text", "need_text", "pick_window_ms",
           "principal_notes"]

MAX_PANELS = 4
ANONYMOUS = "User:ANONYMOUS"  # the principal of every client on a PLAINTEXT listener
# Report windows the pick chooses from, and the most windows a report's plots show.
WINDOW_STEPS_MS = (100, 200, 500, 1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000, 600_000,
                   900_000, 1_800_000, 3_600_000, 7_200_000, 21_600_000, 43_200_000, 86_400_000)
MAX_WINDOWS = 100
OBSERVED = "observed"  # the setting name of what the broker itself decided
BROKERS_QUOTAS = "broker's quotas"


@dataclass
class ReportResult:
    out: Path
    events: int
    timings: dict[str, float] = field(default_factory=dict)
    cores: dict[str, float] = field(default_factory=dict)  # cores kept busy per stage, when measured
    headline: list[str] = field(default_factory=list)
    answer: Answer | None = None
    totals: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)
    settings: list[QuotaSettings] = field(default_factory=list)
    timeline: QuotaTimeline | None = None
    window_ms: int | None = None  # the report's window, as given or picked from the audit's length
    window_picked: bool = False


class _Stages:
    """Times each stage and reports it (`progress(name, what, seconds)`) when it ends; with a
    `cpu` probe (minibroker.pipeline.session.cpu_seconds_probe) also how many cores it kept busy on average."""

    def __init__(self, progress: Callable[[str, str, float], None] | None, cpu: Callable[[], float] | None = None) -> None:
        self.timings: dict[str, float] = {}
        self.cores: dict[str, float] = {}
        self.progress = progress
        self.cpu = cpu

    def __call__(self, name: str):
        stages = self

        class _Stage:
            note = ""

            def __enter__(self):
                self.cpu = stages.cpu() if stages.cpu is not None else None
                self.start = time.perf_counter()
                return self

            def __exit__(self, *exc):
                elapsed = time.perf_counter() - self.start
                stages.timings[name] = elapsed
                note = self.note
                if self.cpu is not None and elapsed > 0:
                    stages.cores[name] = (stages.cpu() - self.cpu) / elapsed
                    note = f"{note} [{stages.cores[name]:.1f} cores busy]"
                if stages.progress is not None and exc[0] is None:
                    stages.progress(name, note, elapsed)

        return _Stage()


def pick_window_ms(span_ms: int) -> int:
    """The report's window for an audit `span_ms` long: the shortest of WINDOW_STEPS_MS that cuts it
    into at most MAX_WINDOWS windows (a 20 s audit in 1 s windows, 4 h in 5 min ones), so plots show
    the audit's course rather than one point."""
    for step in WINDOW_STEPS_MS:
        if span_ms / step <= MAX_WINDOWS:
            return step
    return WINDOW_STEPS_MS[-1]


def duration_text(ms: float) -> str:
    """A duration as a reader takes it in: 850 ms, 12.5 s, 73.4 min, 2.1 h."""
    if ms != ms:  # NaN: no value
        return "–"
    if ms < 1000:
        return f"{ms:,.0f} ms"
    seconds = ms / 1000
    if seconds < 120:
        return f"{seconds:,.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:,.1f} min"
    return f"{seconds / 3600:,.1f} h"


def need_text(rate: float) -> str:
    """A needed producer_ids_rate as the page shows it: a user with one producer id needs no
    particular rate ("any (1)": any rate admits a single id, 1 is the smallest whole one)."""
    if rate != rate:
        return "–"
    if rate <= 0:
        return "any (1)"
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"


def principal_notes(principals: Sequence[str]) -> list[str]:
    """What the users in the audit allow the answer to say: per-user answers need authenticated
    users, and every client on a PLAINTEXT listener is the one user ANONYMOUS."""
    names = set(principals)
    if not names or ANONYMOUS not in names:
        return []
    how = ("clients on a SASL_PLAINTEXT listener (minibroker serve --sasl-listen HOST:PORT --sasl-user "
           "NAME:PASSWORD), each logging in as its own user")
    if names == {ANONYMOUS}:
        return [f"Every request in this audit is by {ANONYMOUS} (clients on a PLAINTEXT listener): per-user answers "
                f"need authenticated users, {how}. Until then all clients count as one user, and so does the answer."]
    return [f"Requests by {ANONYMOUS} (clients on a PLAINTEXT listener) count as one user: per-user answers need "
            f"authenticated users, {how}."]


def candidate(rate: float, windows: dict | None = None) -> QuotaSettings:
    """A uniform candidate: this producer_ids_rate for every user (the user default)."""
    return QuotaSettings(f"producer_ids_rate={rate:g}", producer_ids_rate=float(rate), **(windows or {}))


EPOCH_2000_MS = 946_684_800_000


class _Clock:
    """How `ts` is shown. The broker stamps events with the clock of its quota decisions; when that
    is not wall time (a monotonic clock: values before the year 2000), times are shown as elapsed
    since the first event instead of as dates."""

    def __init__(self, first_ms: int) -> None:
        self.wall = first_ms >= EPOCH_2000_MS
        self.origin = 0 if self.wall else first_ms

    def times(self, ms: pd.Series) -> pd.Series:
        return pd.to_datetime(pd.Series(ms) - self.origin, unit="ms")

    def axis(self, ax) -> None:
        if self.wall:
            locator = mdates.AutoDateLocator(minticks=3, maxticks=7)
            ax.xaxis.set_major_locator(locator)
            ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
            ax.set_xlabel("time (UTC)")
        else:
            ax.xaxis.set_major_locator(mdates.AutoDateLocator(minticks=3, maxticks=7))
            ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(_elapsed))
            ax.set_xlabel("time since the first audit event (h:mm:ss)")

    def describe(self, first_ms: int, last_ms: int) -> str:
        seconds = (last_ms - first_ms) / 1000
        length = f"{seconds:,.1f} s" if seconds < 120 else f"{seconds / 60:,.1f} min"
        if not self.wall:
            return f"{length} of broker time (its quota clock is not wall time)"
        first = pd.to_datetime(first_ms, unit="ms", utc=True)
        last = pd.to_datetime(last_ms, unit="ms", utc=True)
        return f"{first:%Y-%m-%d %H:%M:%S} to {last:%Y-%m-%d %H:%M:%S} UTC ({length})"


def _elapsed(value: float, _position=None) -> str:
    seconds = round(value * 86_400)  # matplotlib date numbers are days since 1970-01-01
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def build_report(
    parsed: DataFrame,
    *,
    out: Path,
    candidates: Sequence[QuotaSettings] = (),
    window_ms: int | None = None,
    model: StateMemoryModel | None = None,
    expiration_ms: int | None = None,
    source: str = "",
    keep_decisions: bool = False,
    flags: dict | None = None,
    fallback: QuotaSettings | None = None,
    auto: bool = True,
    producer_byte_rate: float | None = None,
    progress: Callable[[str, str, float], None] | None = None,
    cpu: Callable[[], float] | None = None,
    chunk_events: int | None = None,
) -> ReportResult:
    """The report of the audit in `parsed` (pipeline.read.PARSED_SCHEMA).

    `candidates`: settings to replay besides "no quota", the broker's recorded quotas and (with
    `auto`) the two the answer picks. `window_ms`: the report's window (None: picked from the
    audit's length, `pick_window_ms`). `flags`: window settings given by hand (QuotaSettings field
    names: pid_window_size_seconds, ...), used by the candidates instead of the recorded ones and
    flagged where they differ. `fallback`: the broker's quotas when the audit recorded none (its
    quota store). `expiration_ms`: producer.id.expiration.ms (default: as recorded, else 24 h).
    `producer_byte_rate`: applied in the picked candidates too."""
    model = model or StateMemoryModel()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stages = _Stages(progress, cpu)
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    result = ReportResult(out, 0)

    with stages("read") as stage:
        parsed = parsed.persist(StorageLevel.MEMORY_AND_DISK)
        kinds = (
            parsed.select(F.when(~is_audit_event(), "skipped").when(is_quota_config(), "quota")
                          .otherwise("event").alias("kind"))
            .groupBy("kind").count().collect()
        )
        counts = {row.kind: row["count"] for row in kinds}
        timeline = QuotaTimeline.from_records(quota_records(parsed) if counts.get("quota") else [])
        n_events = counts.get("event", 0)
        stage.note = (f"{n_events:,} audit events, {counts.get('quota', 0):,} quota record(s)"
                      + (f", {counts['skipped']:,} record(s) that are not audit events skipped"
                         if counts.get("skipped") else ""))
    result.events, result.timeline = n_events, timeline
    recorded = timeline.first_windows()
    windows = recorded or WindowSettings()
    if expiration_ms is None:
        expiration_ms = windows.producer_id_expiration_ms
    notes = list(timeline.notes) + _window_notes(timeline, flags)
    if not timeline.recorded and n_events:
        notes.append("The audit does not record the broker's quota configuration (a broker with audit.enable=true "
                     "records it at its start and at each AlterClientQuotas; retention removed it, or the audit is "
                     "an older broker's or a synthetic trace): the window settings are "
                     + ("the flags given" if flags else "the broker's defaults")
                     + (" and \"broker's quotas\" are those of its quota store now"
                        if fallback is not None else "") + ".")
    pid_window = flags.get("pid_window_size_seconds", windows.pid_window_size_seconds)
    layers = flags.get("pid_layer_count", windows.pid_layer_count)
    result.notes = notes

    events = decision_events(parsed)
    if n_events == 0:
        (out / "index.html").write_text(_page_empty(source, timeline, notes))
        result.headline = ["The audit holds no decisions yet: no client has produced, fetched or started an idempotent "
                           "producer since the audit was turned on, so there is nothing to answer."]
        result.timings = stages.timings
        parsed.unpersist()
        return result
    span = events.agg(F.min("ts").alias("first"), F.max("ts").alias("last")).first()
    clock = _Clock(span["first"])
    result.window_picked = window_ms is None
    if window_ms is None:
        window_ms = pick_window_ms(int(span["last"] - span["first"]))
    result.window_ms = window_ms

    with stages("summary") as stage:
        summary = jobs.summary(events, window_ms)
        summary.write.mode("overwrite").parquet(str(out / "summary"))
        pids = (
            events.where(F.col("producer_id") >= 0).select("principal", "producer_id").distinct()
            .groupBy("principal").agg(F.count(F.lit(1)).alias("distinct_pids"))
        )
        principals = (
            events.groupBy("principal")
            .agg(F.count(F.lit(1)).alias("events"),
                 F.sum((F.col("api_key") == 0).cast("long")).alias("produce_events"),
                 F.sum(F.when(F.col("api_key") == 0, F.col("bytes")).otherwise(0)).alias("produce_bytes"),
                 F.sum((F.col("throttle_time_ms") > 0).cast("long")).alias("throttled_events"))
            .join(pids, "principal", "left")
            .fillna(0, ["distinct_pids"])
            .orderBy(F.desc("events"))
            .toPandas()
        )
        observed_windows = (
            events.where(F.col("throttle_time_ms") > 0)
            .groupBy("principal", "client_id", "api_key", "ts")  # one throttle per request
            .agg(F.max("throttle_time_ms").alias("throttle_time_ms"))
            .withColumn("window_start_ms", jobs.window_start(window_ms))
            .groupBy("principal", "window_start_ms")
            .agg(F.max("throttle_time_ms").alias("max_throttle_ms"),
                 F.sum("throttle_time_ms").alias("sum_throttle_ms"))
            .toPandas()
        )
        n_produce = int(principals["produce_events"].sum())
        notes += principal_notes(list(principals["principal"]))
        stage.note = (f"{len(principals):,} user(s), {n_produce:,} produce batches, "
                      f"{int(principals['distinct_pids'].sum()):,} producer ids")

    with stages("new_pids") as stage:
        new_pids = jobs.new_pid_events(events, expiration_ms).persist(StorageLevel.MEMORY_AND_DISK)
        per_window = jobs.new_pids_per_window(new_pids, window_ms)
        per_window.write.mode("overwrite").parquet(str(out / "new_pids_per_window"))
        per_window_pd = per_window.toPandas()
        needs = jobs.user_needs(new_pids, pid_window, layers, int(span["last"] - span["first"]))
        needs.to_parquet(out / "user_needs.parquet", index=False)
        found = answer(needs, pid_window, int(span["last"] - span["first"]))
        new_pids.unpersist()
        stage.note = (f"{int(needs['new_pids'].sum()) if len(needs) else 0:,} new producer ids; "
                      + (f"answer: X={found.throttle_rate:g}, " if found.throttle_rate is not None else "")
                      + (f"Y={found.nobody_rate:g}" if found.nobody_rate is not None else "no producer ids"))

    settings = _settings(timeline, fallback, found if auto else None, candidates,
                         {**flags, **({"producer_byte_rate": producer_byte_rate} if producer_byte_rate else {})})
    with stages("replay") as stage:
        plan: dict = {}
        if n_produce:
            if keep_decisions:
                replay(events, settings, timeline).write.mode("overwrite").parquet(str(out / "replay_decisions"))
            aggregates = whatif(events, settings, window_ms, model, expiration_ms, timeline,
                                chunk_events=chunk_events, plan=plan,
                                user_counts=dict(zip(principals["principal"], principals["produce_events"].astype(int))))
        else:
            aggregates = events.sparkSession.createDataFrame([], "setting string")
        hot = {u: k for u, k in plan.get("chunks", {}).items() if k > 1}
        stage.note = (f"{len(settings)} setting(s) x {len(plan.get('groups', {})):,} (user, chunk) group(s) = "
                      f"{len(settings) * len(plan.get('groups', {})):,} tasks"
                      + (f"; split by time: {', '.join(f'{u} in {k}' for u, k in hot.items())}" if hot else ""))
    with stages("replay_tables") as stage:
        if n_produce:
            windows_df = windows_table(aggregates)
            windows_df.write.mode("overwrite").parquet(str(out / "replay_windows"))
            windows_pd = windows_df.toPandas()
            totals_pd = totals_table(aggregates).toPandas()
            state = state_table(aggregates, model)
            state.write.mode("overwrite").parquet(str(out / "state_over_time"))
            state_pd = state.toPandas()
            aggregates.unpersist()
        else:
            windows_pd = pd.DataFrame(columns=["setting", "principal", "window_start_ms", *COUNTS])
            totals_pd = pd.DataFrame(columns=["setting", "principal", *COUNTS, "mismatched_events"])
            state_pd = pd.DataFrame(columns=["setting", "window_start_ms", "entries", "lean_bytes", "kafka_batches",
                                             "kafka_bytes"])
        observed = jobs.observed_totals(events).toPandas()
        observed.insert(0, "setting", OBSERVED)
        observed["mismatched_events"] = 0
        totals_pd = pd.concat([observed[totals_pd.columns], totals_pd], ignore_index=True) if len(observed) else totals_pd
        totals_pd.to_parquet(out / "replay_totals.parquet", index=False)
        stage.note = f"{len(totals_pd):,} (setting, user) totals, {len(windows_pd):,} window rows"
    parsed.unpersist()

    result.headline = _headline(found, totals_pd, settings, n_produce)
    mismatch = _replay_check(totals_pd, settings)
    if mismatch:
        notes.append(mismatch)
    with stages("plots") as stage:
        uniform = [c for c in settings if c.producer_ids_rate is not None and not c.user_producer_ids_rates
                   and not c.recorded]
        figures = [
            _plot_new_pids(clock, per_window_pd, found, uniform, pid_window, window_ms, out / "pids_per_window.png"),
            _plot_throttle(clock, windows_pd, observed_windows, settings[1:], window_ms, span,
                           out / "throttle_over_time.png"),
            _plot_state(clock, state_pd, settings, model, expiration_ms, window_ms, out / "state_size.png"),
        ]
        (out / "index.html").write_text(
            _page(source, n_events, clock.describe(span["first"], span["last"]), settings, timeline, windows,
                  flags, window_ms, model, expiration_ms, principals, found, totals_pd, result.headline, notes,
                  figures, window_picked=result.window_picked)
        )
        stage.note = f"{out / 'index.html'}"
    result.timings, result.cores = stages.timings, stages.cores
    result.answer, result.totals, result.settings = found, totals_pd, settings
    return result


def _window_notes(timeline: QuotaTimeline, flags: dict) -> list[str]:
    """Disagreements between the flags given and the recorded window settings, and changes of the
    recorded settings over time."""
    notes = []
    recorded = timeline.window_settings()
    if len(recorded) > 1:
        notes.append(f"The broker restarted with different window settings during the audit ({len(recorded)} "
                     "sets recorded): every setting is replayed with the ones in force at each time.")
    if flags and recorded:
        given = WindowSettings(**{**recorded[0].__dict__, **flags})
        differences = given.differences(recorded[0])
        if differences:
            notes.append("MISMATCH: the flags differ from the broker's recorded settings: " + ", ".join(differences)
                         + ". The candidates use the flags; \"broker's quotas\" and \"observed\" use the "
                         "broker's own, so they are not comparable with the candidates.")
    return notes


def _settings(timeline: QuotaTimeline, fallback: QuotaSettings | None, found: Answer | None,
              candidates: Sequence[QuotaSettings], flags: dict) -> list[QuotaSettings]:
    windows_only = {k: v for k, v in flags.items() if k != "producer_byte_rate"}
    settings = [QuotaSettings("no quota", **windows_only)]
    if timeline.recorded:
        settings.append(QuotaSettings(BROKERS_QUOTAS, recorded=True))
    elif fallback is not None:
        settings.append(fallback)
    rates = []
    if found is not None:
        rates += [r for r in (found.throttle_rate, found.nobody_rate) if r is not None]
    named = {s.name for s in settings}
    for rate in rates:
        c = candidate(rate, flags)
        if c.name not in named:
            settings.append(c)
            named.add(c.name)
    for c in candidates:
        if c.name not in named:
            settings.append(c)
            named.add(c.name)
    return settings


def _user(principal: str) -> str:
    return principal[5:] if principal.startswith("User:") else principal


def _headline(found: Answer, totals: pd.DataFrame, settings, n_produce: int) -> list[str]:
    """The report's first lines (see the module docstring)."""
    unit = f"new producer ids per {found.window_size_seconds:g} s"
    if n_produce == 0:
        return ["No produce requests in this audit: producer_ids_rate has nothing to throttle."]
    if found.nobody_rate is None:
        return [f"No producer ids in this audit ({n_produce:,} produce batches, none from an idempotent producer): "
                "a producer_ids_rate throttles nobody, whatever its value."]

    def rejected(rate: float) -> dict[str, int]:
        rows = totals[(totals.setting == candidate(rate).name) & (totals.pid_rejected_batches > 0)]
        return {_user(r.principal): int(r.pid_rejected_batches)
                for r in rows.sort_values("pid_rejected_batches", ascending=False).itertuples()}

    def listing(hit: dict[str, int]) -> str:
        parts = [f"{u} ({n:,} batch{'es' if n != 1 else ''})" for u, n in hit.items()]
        return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]

    y = found.nobody_rate
    y_hit = rejected(y)
    y_text = (f"{y:,g} throttles nobody" if not y_hit else f"{y:,g} still throttles {listing(y_hit)}")
    if found.throttle_rate is None:
        first = (f"No user creates producer ids far faster than the others: a default producer_ids_rate of "
                 f"{y_text.replace(' throttles', ' throttles', 1)}.")
    else:
        x = found.throttle_rate
        x_hit = rejected(x)
        outliers = ", ".join(_user(u) for u in found.outliers)
        if x_hit:
            only = "only " if set(x_hit) <= {_user(u) for u in found.outliers} else ""
            first = f"A default producer_ids_rate of {x:,g} throttles {only}{listing(x_hit)}; {y_text}."
        else:
            first = (f"A default producer_ids_rate of {x:,g} throttles nobody in this audit but would throttle only "
                     f"{outliers} over a whole window; {y_text}.")
    return [first, f"Rates in the broker's unit ({unit}), values it accepts; {found.basis()}."]


def _replay_check(totals: pd.DataFrame, settings) -> str | None:
    """Whether replaying the broker's recorded quotas reproduced the broker's own decisions."""
    if not any(s.recorded for s in settings) or totals.empty:
        return None
    mine = totals[totals.setting == BROKERS_QUOTAS]
    mismatched = int(mine["mismatched_events"].sum())
    if mismatched:
        return (f"MISMATCH: replaying the broker's recorded quotas differs from the broker's own producer-id decisions "
                f"on {mismatched:,} event(s): producer state from before the audit, or a broker whose settings the "
                "audit does not show, can explain it.")
    return None


# -- plots ----------------------------------------------------------------------------------------


def _window_label(window_ms: int) -> str:
    seconds = window_ms / 1000
    if seconds < 1:
        return f"{window_ms:g} ms"
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def _no_data(path: Path, title: str, text: str):
    fig, ax = plt.subplots(figsize=(8, 2))
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="gray")
    ax.set_axis_off()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name, title, text


def _plot_new_pids(clock: _Clock, per_window: pd.DataFrame, found: Answer, candidates, pid_window_s: float,
                   window_ms: int, path: Path):
    title = "New producer IDs per window"
    if per_window.empty:
        return _no_data(path, title, "No producer IDs in this audit: no idempotent producer sent anything.")
    # producer_ids_rate is per quota window (pid_window_size_seconds); the plot's windows may differ.
    allowance = {c.name: c.producer_ids_rate * window_ms / (pid_window_s * 1000) for c in candidates}
    if not found.users.empty:
        order = list(found.users["principal"])
    else:
        order = list(per_window.groupby("principal")["new_pids"].sum().sort_values(ascending=False).index)
    shown = order[:MAX_PANELS]
    cols = 2 if len(shown) > 1 else 1
    rows = max(1, math.ceil(len(shown) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 3.2 * rows), squeeze=False, sharex=True)
    start, end = int(per_window["window_start_ms"].min()), int(per_window["window_start_ms"].max())
    grid = pd.Series(range(start, end + window_ms, window_ms), name="window_start_ms")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, principal in zip(axes.flat, shown):
        data = per_window[per_window.principal == principal].set_index("window_start_ms")["new_pids"]
        data = data.reindex(grid, fill_value=0)
        edges = pd.Series([*data.index, data.index[-1] + window_ms])
        ax.step(clock.times(edges), [*data.values, data.values[-1]], where="post", color="black", lw=1.2,
                label="new producer IDs")
        for i, c in enumerate(candidates):
            ax.axhline(allowance[c.name], color=colors[(i + 1) % len(colors)], ls="--", lw=1.2,
                       label=f"producer_ids_rate={c.producer_ids_rate:g} per {_window_label(round(pid_window_s * 1000))}"
                             f" (= {allowance[c.name]:.3g} per window)")
        ax.set_title(principal, fontsize=10)
        ax.set_ylabel(f"new PIDs per {_window_label(window_ms)}")
        top = max(float(data.max()), max(allowance.values(), default=1))
        if top > 50 * max(1.0, float(data[data > 0].min()) if (data > 0).any() else 1.0):
            ax.set_yscale("symlog", linthresh=1)
        ax.set_ylim(bottom=0)
        clock.axis(ax)
        ax.grid(alpha=0.3)
    for ax in axes[:-1].flat:
        ax.set_xlabel("")
    for ax in list(axes.flat)[len(shown):]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize=8, frameon=False)
    fig.suptitle(f"New producer IDs per {_window_label(window_ms)} window, per user, against each "
                 "candidate quota's steady allowance", fontsize=11)
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    caption = (
        f"Black: how many producer IDs each user started (or brought back after a long silence) in each "
        f"{_window_label(window_ms)} window; the dashed lines are what each candidate producer_ids_rate "
        "admits per window in the long run. A user whose black line stays above a dashed line uses up "
        "its allowance and is then throttled under that candidate (next plot). The first and last "
        f"windows may be partial. Up to {MAX_PANELS} users, those needing the highest rate first."
    )
    return path.name, title, caption


def _plot_throttle(clock: _Clock, windows: pd.DataFrame, observed: pd.DataFrame, candidates, window_ms, span,
                   path: Path):
    panels = []
    if not observed.empty:
        panels.append(("observed: what the broker decided", observed))
    for c in candidates:
        data = windows[(windows.setting == c.name) & (windows.sum_throttle_ms > 0)]
        panels.append((f"what-if: {c.name}", data[["principal", "window_start_ms", "sum_throttle_ms",
                                                           "max_throttle_ms"]]))
    if not panels:
        return _no_data(path, "Throttle time over time", "No produce requests to replay.")
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 2.7 * len(panels)), squeeze=False, sharex=True)
    start = span["first"] // window_ms * window_ms
    end = span["last"] // window_ms * window_ms
    for ax, (title, data) in zip(axes.flat, panels):
        if data.empty:
            ax.text(0.5, 0.5, "no request throttled", transform=ax.transAxes, ha="center", va="center",
                    color="gray")
        for principal, group in data.groupby("principal"):
            group = group.sort_values("window_start_ms")
            longest = group["max_throttle_ms"].max()
            ax.plot(clock.times(group["window_start_ms"] + window_ms / 2), group["sum_throttle_ms"] / 1000,
                    marker="o", ms=3, lw=1.2, label=f"{principal} (longest single throttle {duration_text(longest)})")
        ax.set_xlim(clock.times(pd.Series([start]))[0], clock.times(pd.Series([end + window_ms]))[0])
        ax.set_title(title, fontsize=10, loc="left")
        ax.set_ylabel("throttle time (s)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        if not data.empty:
            ax.legend(fontsize=8, loc="best")
        clock.axis(ax)
    for ax in axes[:-1].flat:
        ax.set_xlabel("")
    fig.suptitle(f"Throttle time over time: total throttle_time_ms handed to each user per "
                 f"{_window_label(window_ms)} window", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    caption = (
        "One panel per candidate setting (and one for the broker's own decisions when the audit recorded "
        "any throttling). Each point adds up the throttle times a user's throttled produce requests were "
        "given in that window (seconds its clients were told to wait, by the producer-id quota for a "
        "rejected new producer ID, or by the byte-rate quota); the legend gives the longest single "
        "throttle. A producer-id rejection asks for the time until the quota window frees a slot (up to "
        "the window plus one layer). Users never throttled do not appear."
    )
    return path.name, "Throttle time over time", caption


def _plot_state(clock: _Clock, state: pd.DataFrame, settings, model: StateMemoryModel, expiration_ms, window_ms, path: Path):
    if state.empty or not (state["entries"] > 0).any():
        return _no_data(path, "Producer state over time",
                        "No producer state: no idempotent producer's batch was appended in this audit.")
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, setting in enumerate(settings):
        data = state[state.setting == setting.name].sort_values("window_start_ms")
        if data.empty:
            continue
        # Each row is the state at the END of its window; start from nothing at the first window.
        times = clock.times(pd.concat([data["window_start_ms"].iloc[:1], data["window_start_ms"] + window_ms]))
        color = colors[i % len(colors)]
        label = setting.name
        # Each series starts from nothing at the first window's start.
        lean_mb, kafka_mb, entries = ([0.0, *data[column].astype(float)] for column in
                                      ("lean_bytes", "kafka_bytes", "entries"))
        axes[0].plot(times, [v / 1e6 for v in lean_mb], color=color, lw=1.6, label=f"{label}, lean")
        axes[0].plot(times, [v / 1e6 for v in kafka_mb], color=color, lw=1.2, ls="--", label=f"{label}, kafka")
        axes[1].plot(times, entries, color=color, lw=1.6, label=label)
    axes[0].set_title("producer-state memory", fontsize=10)
    axes[0].set_ylabel("memory (MB)")
    axes[1].set_title("producer-state entries (live producer ID x partition)", fontsize=10)
    axes[1].set_ylabel("entries")
    for ax in axes:
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
        clock.axis(ax)
    fig.suptitle("Producer state the broker would hold, lean mode (solid) vs kafka mode (dashed)", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    caption = (
        "Left: memory the broker's producer state would take over time under each setting, in lean mode "
        "(the broker's default: the latest batch per producer ID and partition) and kafka mode (Apache "
        f"Kafka's: the last 5 batches), with {model.describe()}. Right: the number of entries. An entry "
        f"lives until {expiration_ms / 3_600_000:g} h (producer.id.expiration.ms) after its producer's "
        "last batch, so producer IDs rejected by a quota never take any. Settings that reject nothing "
        "hold what \"no quota\" holds: their lines lie on top of each other."
    )
    return path.name, "Producer state over time", caption


# -- HTML -----------------------------------------------------------------------------------------

_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
figure { margin: 1.5em 0; } img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 0.92em; color: #444; max-width: 900px; }
.note { color: #555; font-size: 0.92em; max-width: 900px; }
.answer { font-size: 1.15em; max-width: 900px; }
.flag { color: #a00; font-weight: bold; max-width: 900px; }
"""


def _fmt(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        if value == 0:
            return "0"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return html.escape(str(value))


def _table(frame: pd.DataFrame, columns: dict[str, str]) -> str:
    head = "".join(f"<th>{html.escape(title)}</th>" for title in columns.values())
    body = "".join(
        "<tr>" + "".join(f"<td>{_fmt(row[c])}</td>" for c in columns) + "</tr>"
        for row in frame.to_dict("records")
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _quota_record(timeline: QuotaTimeline) -> str:
    """The recorded quota configuration, as the page shows it."""
    if not timeline.recorded:
        return ""
    rows = []
    for step in timeline.steps:
        when = pd.to_datetime(step.ts, unit="ms", utc=True).strftime("%Y-%m-%d %H:%M:%S")
        what = "broker start" if step.start else f"AlterClientQuotas by {step.principal}"
        values = ", ".join(
            f"{'default user' if user is None else 'user ' + user}: {key}="
            + ("removed" if value is None else f"{value:g}")
            for user, key, value in step.quotas
        ) or ("no user quotas" if step.start else "no user-level change")
        settings = ""
        if step.start and step.windows is not None:
            w = step.windows
            settings = (f"window {w.pid_window_size_seconds:g} s in {w.pid_layer_count} layers, "
                        f"false-positive rate {w.false_positive_rate:g}; byte rates over {w.quota_window_num} x "
                        f"{w.quota_window_size_seconds:g} s")
        rows.append({"when": when, "what": what, "quotas": values, "settings": settings})
    return ("<h2>The broker's quota configuration, as recorded</h2>"
            + _table(pd.DataFrame(rows), {"when": "time (UTC)", "what": "event", "quotas": "user-level quotas",
                                          "settings": "window settings"}))


def _notes_html(notes: list[str]) -> str:
    return "".join(f"<p class='{'flag' if n.startswith('MISMATCH') else 'note'}'>{html.escape(n)}</p>" for n in notes)


def _page_empty(source: str, timeline: QuotaTimeline, notes: list[str]) -> str:
    return (f"<!doctype html><meta charset=utf-8><title>minibroker audit report</title><style>{_STYLE}</style>"
            f"<h1>minibroker audit report</h1><p class=answer>No decisions in the audit of {html.escape(source)} yet: "
            "nothing to answer. Start the broker with <code>--override audit.enable=true</code> and produce "
            "something first.</p>" + _notes_html(notes) + _quota_record(timeline))


def _page(source, n_events, span, settings, timeline, windows, flags, window_ms, model, expiration_ms,
          principals, found: Answer, totals, headline, notes, figures, window_picked: bool = False) -> str:
    window_s = flags.get("pid_window_size_seconds", windows.pid_window_size_seconds)
    parts = [
        "<!doctype html><meta charset=utf-8><title>minibroker audit report</title>",
        f"<style>{_STYLE}</style><h1>minibroker audit report</h1>",
        "".join(f"<p class=answer>{html.escape(line)}</p>" for line in headline),
    ]
    if found.nobody_rate is not None:
        rate = found.throttle_rate if found.throttle_rate is not None else found.nobody_rate
        parts.append(
            "<p class=note>To set it: <code>minibroker configs --bootstrap-server HOST:PORT --alter --entity-type users "
            f"--entity-default --add-config producer_ids_rate={rate:g}</code> (or AlterClientQuotas from any admin "
            "client).</p>")
    parts += [
        _notes_html(notes),
        f"<p>{n_events:,} audit events from <code>{html.escape(source)}</code>, {span}. "
        f"Report windows: {_window_label(window_ms)}"
        + (" (picked from the audit's length; --window-seconds sets another)" if window_picked else "") + ".</p>",
        "<p class=note>Producer-id quota (KIP-936) as the broker implements it: <code>producer_ids_rate</code> is "
        f"the number of new producer IDs a user may introduce per window of {window_s:g} s "
        "(producer.id.quota.window.size.seconds): at most floor(rate) in any such window, one per "
        "window / rate below 1. A producer ID with producer state is never new; a new "
        "producer ID over the quota is rejected, not appended, and its batch is answered with a throttle "
        "time. Each setting below replays every user's produce requests through the broker's own quota "
        "classes; \"observed\" is what the broker itself decided.</p>",
    ]
    if not found.users.empty:
        users = found.users.assign(user=found.users["principal"].map(_user),
                                   kind=found.users["outlier"].map({True: "far above the others", False: ""}),
                                   needed_rate=found.users["needed_rate"].map(need_text),
                                   per_window=found.users["per_window"].map(need_text))
        parts += [
            "<h2>What each user needs</h2>",
            f"<p class=note><b>needed over the audit</b>: the smallest producer_ids_rate under which the quota (its "
            f"own slot arithmetic) admits every new producer ID this user introduced. <b>needed per window</b>: "
            f"over a whole {window_s:g} s window: {html.escape(found.basis())}. \"any (1)\": a single producer "
            "ID, which any rate admits (1 is the smallest whole rate). A user far above the others is "
            "creating producers per batch or crash-looping: fix the client (reuse one producer) rather than raise "
            "the quota for it.</p>",
            _table(users, {"user": "user", "new_pids": "new producer IDs",
                           "needed_rate": "needed over the audit", "per_window": "needed per window",
                           "kind": ""}),
        ]
    if not totals.empty:
        order = {OBSERVED: -1, **{s.name: i for i, s in enumerate(settings)}}
        by_setting = (
            totals.groupby("setting", as_index=False)
            .agg(produce_requests=("produce_requests", "sum"), pid_rejected_batches=("pid_rejected_batches", "sum"),
                 pid_throttled_pids=("pid_throttled_pids", "sum"), throttled_requests=("throttled_requests", "sum"),
                 max_throttle_ms=("max_throttle_ms", "max"))
            .sort_values("setting", key=lambda s: s.map(order))
        )
        by_setting["max_throttle_ms"] = by_setting["max_throttle_ms"].map(duration_text)
        by_setting["setting"] = by_setting["setting"].map(
            lambda n: "observed (what the broker decided)" if n == OBSERVED
            else "broker's quotas (replayed, as recorded)" if n == BROKERS_QUOTAS else n)
        parts += [
            "<h2>What each setting would have done</h2>",
            _table(by_setting, {
                "setting": "setting", "produce_requests": "produce requests",
                "throttled_requests": "throttled requests", "pid_rejected_batches": "rejected batches",
                "pid_throttled_pids": "throttled producer IDs", "max_throttle_ms": "longest throttle",
            }),
            "<details><summary>per user</summary>",
            _table(totals.sort_values(["setting", "principal"], key=lambda s: s.map(order) if s.name == "setting" else s)
                   .assign(max_throttle_ms=lambda t: t["max_throttle_ms"].map(duration_text)), {
                "setting": "setting", "principal": "user", "produce_events": "produce batches",
                "new_pids": "new producer IDs", "pid_rejected_batches": "rejected batches",
                "pid_throttled_pids": "throttled producer IDs", "throttled_requests": "throttled requests",
                "max_throttle_ms": "longest throttle",
            }),
            "</details>",
        ]
    for name, title, caption in figures:
        parts.append(f"<h2>{html.escape(title)}</h2><figure><img src='{name}' alt='{html.escape(title)}'>"
                     f"<figcaption>{html.escape(caption)}</figcaption></figure>")
    parts += [
        _quota_record(timeline),
        "<h2>Users in the audit</h2>",
        _table(principals, {"principal": "user", "events": "events", "produce_bytes": "produced bytes",
                            "distinct_pids": "distinct producer IDs", "throttled_events": "throttled events"}),
        "<h2>Tables</h2><p class=note>Parquet, next to this page: <code>summary/</code> (per window, user "
        "and client id: requests, bytes, records, distinct producer IDs exact and approximate, throttle "
        "percentiles), <code>new_pids_per_window/</code>, <code>replay_windows/</code>, "
        "<code>replay_totals.parquet</code>, <code>state_over_time/</code>, <code>user_needs.parquet</code>.</p>",
    ]
    return "\n".join(parts)
