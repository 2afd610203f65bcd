"""Run the jobs and write the report: Parquet tables, PNG plots (matplotlib, Agg) and `index.html`.

Everything a reader needs is on the page: what was read, the settings compared, a recommendation
per user, what each candidate would have throttled, and three plots, each with a sentence saying how
to read it. Tables (Parquet, one directory each, readable by Spark, pandas, DuckDB ...):

* `summary/`: per window, principal and client id (pipeline.jobs.summary);
* `new_pids_per_window/`: the producer-id quota's demand per principal and window;
* `replay_decisions/` (only with `--keep-decisions`): one row per Produce event per setting;
* `replay_windows/`, `replay_totals.parquet`: the what-if replay, per window and in total;
* `state_over_time/`: producer-state entries and bytes, lean vs kafka, per setting;
* `recommendations.parquet`: per principal.
"""

from __future__ import annotations

import html
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.ticker  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from pyspark import StorageLevel  # noqa: E402
from pyspark.sql import DataFrame  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from pipeline import jobs  # noqa: E402
from pipeline.model import StateMemoryModel  # noqa: E402
from pipeline.replay import QuotaSettings, replay  # noqa: E402
from pipeline.whatif import (  # noqa: E402
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    state_table,
    totals_table,
    whatif,
    windows_table,
)

__all__ = ["ReportResult", "build_report"]

MAX_PANELS = 4


@dataclass
class ReportResult:
    out: Path
    events: int
    timings: dict[str, float] = field(default_factory=dict)
    recommendations: pd.DataFrame | None = None
    totals: pd.DataFrame | None = None


class _Timer:
    def __init__(self) -> None:
        self.timings: dict[str, float] = {}

    def __call__(self, name: str):
        timer = self

        class _Span:
            def __enter__(self):
                self.start = time.perf_counter()

            def __exit__(self, *exc):
                timer.timings[name] = time.perf_counter() - self.start

        return _Span()


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
    events: DataFrame,
    *,
    out: Path,
    settings: Sequence[QuotaSettings],
    window_ms: int = 60_000,
    model: StateMemoryModel | None = None,
    expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    source: str = "",
    keep_decisions: bool = False,
) -> ReportResult:
    """`settings[0]` is the baseline (normally "no quota"); the others are the candidates."""
    model = model or StateMemoryModel()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    timer = _Timer()
    baseline, candidates = settings[0], list(settings[1:])
    # Uniform candidates (one producer_ids_rate for every user) are what a recommendation picks from.
    uniform = [c for c in candidates if c.producer_ids_rate is not None and not c.user_producer_ids_rates]
    # A PID stays known to the quota as long as it has producer state: producer.id.expiration.ms.
    memory_ms = expiration_ms

    with timer("read"):
        events = events.persist(StorageLevel.MEMORY_AND_DISK)
        n_events = events.count()
    result = ReportResult(out, n_events)
    if n_events == 0:
        (out / "index.html").write_text(_page_empty(source))
        result.timings = timer.timings
        return result
    span = events.agg(F.min("ts").alias("first"), F.max("ts").alias("last")).first()
    clock = _Clock(span["first"])

    with timer("summary"):
        summary = jobs.summary(events, window_ms)
        summary.write.mode("overwrite").parquet(str(out / "summary"))
        pids = (
            events.where(F.col("producer_id") >= 0).select("principal", "producer_id").distinct()
            .groupBy("principal").agg(F.count(F.lit(1)).alias("distinct_pids"))
        )
        principals = (
            events.groupBy("principal")
            .agg(F.count(F.lit(1)).alias("events"),
                 F.sum(F.when(F.col("api_key") == 0, F.col("bytes")).otherwise(0)).alias("produce_bytes"),
                 F.sum((F.col("throttle_time_ms") > 0).cast("long")).alias("throttled_events"))
            .join(pids, "principal", "left")
            .fillna(0, ["distinct_pids"])
            .orderBy(F.desc("events"))
            .toPandas()
        )
        observed = (
            events.where(F.col("throttle_time_ms") > 0)
            .groupBy("principal", "client_id", "api_key", "ts")  # one throttle per request
            .agg(F.max("throttle_time_ms").alias("throttle_time_ms"))
            .withColumn("window_start_ms", jobs.window_start(window_ms))
            .groupBy("principal", "window_start_ms")
            .agg(F.max("throttle_time_ms").alias("max_throttle_ms"),
                 F.sum("throttle_time_ms").alias("sum_throttle_ms"))
            .toPandas()
        )

    with timer("new_pids"):
        new_pids = jobs.new_pid_events(events, memory_ms).persist(StorageLevel.MEMORY_AND_DISK)
        per_window = jobs.new_pids_per_window(new_pids, window_ms)
        per_window.write.mode("overwrite").parquet(str(out / "new_pids_per_window"))
        per_window_pd = per_window.toPandas()

    with timer("replay"):
        if keep_decisions:
            replay(events, settings).write.mode("overwrite").parquet(str(out / "replay_decisions"))
        aggregates = whatif(events, settings, window_ms, model, expiration_ms).persist(StorageLevel.MEMORY_AND_DISK)
        aggregates.count()
    with timer("replay_tables"):
        windows = windows_table(aggregates)
        windows.write.mode("overwrite").parquet(str(out / "replay_windows"))
        windows_pd = windows.toPandas()
        totals_pd = totals_table(aggregates).toPandas()
        totals_pd.to_parquet(out / "replay_totals.parquet", index=False)
        state = state_table(aggregates, model)
        state.write.mode("overwrite").parquet(str(out / "state_over_time"))
        state_pd = state.toPandas()
    with timer("recommendations"):
        recs = (
            jobs.recommendations(new_pids, totals_pd, uniform, window_ms)
            if uniform else pd.DataFrame()
        )
        if not recs.empty:
            recs.to_parquet(out / "recommendations.parquet", index=False)
    aggregates.unpersist()
    new_pids.unpersist()
    events.unpersist()

    with timer("plots"):
        figures = [
            _plot_new_pids(clock, per_window_pd, recs, uniform, window_ms, out / "pids_per_window.png"),
            _plot_throttle(clock, windows_pd, observed, candidates, window_ms, out / "throttle_over_time.png"),
            _plot_state(clock, state_pd, settings, model, expiration_ms, window_ms, out / "state_size.png"),
        ]
        (out / "index.html").write_text(
            _page(source, n_events, clock.describe(span["first"], span["last"]), settings, window_ms, model,
                  expiration_ms, principals, recs, totals_pd, figures)
        )
    result.timings = timer.timings
    result.recommendations = recs
    result.totals = totals_pd
    return result


# -- plots ----------------------------------------------------------------------------------------


def _window_label(window_ms: int) -> str:
    seconds = window_ms / 1000
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def _plot_new_pids(clock: _Clock, per_window: pd.DataFrame, recs: pd.DataFrame, candidates, window_ms, path: Path):
    # producer_ids_rate is per quota window (pid_window_size_seconds); the plot's windows may differ.
    per_report_window = {c.name: c.producer_ids_rate * window_ms / (c.pid_window_size_seconds * 1000)
                         for c in candidates}
    if not recs.empty:
        order = list(recs["principal"])
    else:
        order = list(per_window.groupby("principal")["new_pids"].sum().sort_values(ascending=False).index)
    shown = order[:MAX_PANELS]
    cols = 2 if len(shown) > 1 else 1
    rows = max(1, math.ceil(len(shown) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 3.2 * rows), squeeze=False, sharex=True)
    start, end = per_window["window_start_ms"].min(), per_window["window_start_ms"].max()
    grid = pd.Series(range(int(start), int(end) + window_ms, window_ms), name="window_start_ms")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, principal in zip(axes.flat, shown):
        data = per_window[per_window.principal == principal].set_index("window_start_ms")["new_pids"]
        data = data.reindex(grid, fill_value=0)
        edges = pd.Series([*data.index, data.index[-1] + window_ms])
        ax.step(clock.times(edges), [*data.values, data.values[-1]], where="post", color="black", lw=1.2,
                label="new producer IDs")
        for i, candidate in enumerate(candidates):
            ax.axhline(per_report_window[candidate.name], color=colors[(i + 1) % len(colors)], ls="--",
                       lw=1.2, label=f"producer_ids_rate={candidate.producer_ids_rate:g} per "
                                     f"{_window_label(round(candidate.pid_window_size_seconds * 1000))} "
                                     f"(= {per_report_window[candidate.name]:g} per window)")
        ax.set_title(principal, fontsize=10)
        ax.set_ylabel(f"new PIDs per {_window_label(window_ms)}")
        top = max(float(data.max()), max(per_report_window.values(), default=1))
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
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8, frameon=False)
    fig.suptitle(f"New producer IDs per {_window_label(window_ms)} window, per user, against each "
                 "candidate quota's steady allowance", fontsize=11)
    fig.tight_layout(rect=(0, 0.07, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    caption = (
        f"Black: how many producer IDs each user started (or brought back after a long silence) in each "
        f"{_window_label(window_ms)} window; the dashed lines are what each candidate producer_ids_rate "
        "admits per window in the long run. A user whose black line stays above a dashed line uses up "
        "its allowance and is then throttled under that candidate (next plot). The first and last "
        "windows may be partial. Up to "
        f"{MAX_PANELS} users, those needing the highest rate first."
    )
    return path.name, "New producer IDs per window", caption


def _plot_throttle(clock: _Clock, windows: pd.DataFrame, observed: pd.DataFrame, candidates, window_ms, path: Path):
    panels = []
    if not observed.empty:
        panels.append(("observed: what the broker decided", observed))
    for candidate in candidates:
        data = windows[(windows.setting == candidate.name) & (windows.sum_throttle_ms > 0)]
        panels.append((f"what-if: {candidate.name}", data[["principal", "window_start_ms", "sum_throttle_ms",
                                                           "max_throttle_ms"]]))
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 2.7 * len(panels)), squeeze=False, sharex=True)
    start, end = windows["window_start_ms"].min(), windows["window_start_ms"].max()
    for ax, (title, data) in zip(axes.flat, panels):
        if data.empty:
            ax.text(0.5, 0.5, "no request throttled", transform=ax.transAxes, ha="center", va="center",
                    color="gray")
        for principal, group in data.groupby("principal"):
            group = group.sort_values("window_start_ms")
            longest = group["max_throttle_ms"].max()
            ax.plot(clock.times(group["window_start_ms"] + window_ms / 2), group["sum_throttle_ms"] / 1000,
                    marker="o", ms=3, lw=1.2, label=f"{principal} (longest single throttle {longest:,.0f} ms)")
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

        def at(column):
            return [0.0, *data[column].astype(float)]

        axes[0].plot(times, [v / 1e6 for v in at("lean_bytes")], color=color, lw=1.6, label=f"{label}, lean")
        axes[0].plot(times, [v / 1e6 for v in at("kafka_bytes")], color=color, lw=1.2, ls="--",
                     label=f"{label}, kafka")
        axes[1].plot(times, at("entries"), color=color, lw=1.6, label=label)
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


def _page_empty(source: str) -> str:
    return (f"<!doctype html><meta charset=utf-8><title>minibroker audit report</title><style>{_STYLE}</style>"
            f"<h1>minibroker audit report</h1><p>No audit events in {html.escape(source)}. Start the broker "
            "with <code>--override audit.enable=true</code> and produce something first.</p>")


def _page(source, n_events, span, settings, window_ms, model, expiration_ms, principals, recs, totals,
          figures) -> str:
    baseline = settings[0]
    window_s = baseline.pid_window_size_seconds
    parts = [
        "<!doctype html><meta charset=utf-8><title>minibroker audit report</title>",
        f"<style>{_STYLE}</style><h1>minibroker audit report</h1>",
        f"<p>{n_events:,} audit events from <code>{html.escape(source)}</code>, "
        f"{span}. "
        f"Report windows: {_window_label(window_ms)}.</p>",
        "<p class=note>Producer-id quota (KIP-936) as the broker implements it: <code>producer_ids_rate</code> is "
        f"the number of new producer IDs a user may introduce per window of {window_s:g} s "
        "(producer.id.quota.window.size.seconds): at most floor(rate) in any such window, one per "
        "window / rate below 1. A producer ID with producer state is never new; a new "
        "producer ID over the quota is rejected, not appended, and its batch is answered with a throttle "
        "time. Each candidate below replays every user's produce requests through the broker's own quota "
        "classes.</p>",
    ]
    if not recs.empty:
        parts += [
            "<h2>Recommendation per user</h2>",
            "<p class=note><b>needed rate</b>: the smallest producer_ids_rate that would not have throttled "
            "this user in any window of the trace (the quota's own slot arithmetic on its new producer "
            "IDs). <b>recommended</b>: the smallest candidate under which the replay rejected none of its "
            "batches; <b>headroom</b> = recommended / needed. A user no candidate covers is creating "
            "producers far faster than the others: fix the client (reuse one producer) rather than raise "
            "the quota for it.</p>",
            _table(recs, {
                "principal": "user", "new_pids": "new producer IDs",
                "peak_new_pids_per_window": f"peak per {_window_label(window_ms)}",
                "needed_rate": f"needed rate (PIDs per {window_s:g} s)",
                "recommended_rate": f"recommended (PIDs per {window_s:g} s)",
                "headroom": "headroom (x)", "note": "note",
            }),
        ]
    if not totals.empty:
        order = {s.name: i for i, s in enumerate(settings)}
        by_setting = (
            totals.groupby("setting", as_index=False)
            .agg(produce_requests=("produce_requests", "sum"), pid_rejected_batches=("pid_rejected_batches", "sum"),
                 pid_throttled_pids=("pid_throttled_pids", "sum"), throttled_requests=("throttled_requests", "sum"),
                 max_throttle_ms=("max_throttle_ms", "max"))
            .sort_values("setting", key=lambda s: s.map(order))
        )
        parts += [
            "<h2>What each setting would have done</h2>",
            _table(by_setting, {
                "setting": "setting", "produce_requests": "produce requests",
                "throttled_requests": "throttled requests", "pid_rejected_batches": "rejected batches",
                "pid_throttled_pids": "throttled producer IDs", "max_throttle_ms": "longest throttle (ms)",
            }),
            "<details><summary>per user</summary>",
            _table(totals.sort_values(["setting", "principal"], key=lambda s: s.map(order) if s.name == "setting" else s), {
                "setting": "setting", "principal": "user", "produce_events": "produce batches",
                "new_pids": "new producer IDs", "pid_rejected_batches": "rejected batches",
                "pid_throttled_pids": "throttled producer IDs", "throttled_requests": "throttled requests",
                "max_throttle_ms": "longest throttle (ms)",
            }),
            "</details>",
        ]
    for name, title, caption in figures:
        parts.append(f"<h2>{html.escape(title)}</h2><figure><img src='{name}' alt='{html.escape(title)}'>"
                     f"<figcaption>{html.escape(caption)}</figcaption></figure>")
    parts += [
        "<h2>Users in the audit</h2>",
        _table(principals, {"principal": "user", "events": "events", "produce_bytes": "produced bytes",
                            "distinct_pids": "distinct producer IDs", "throttled_events": "throttled events"}),
        "<h2>Tables</h2><p class=note>Parquet, next to this page: <code>summary/</code> (per window, user "
        "and client id: requests, bytes, records, distinct producer IDs exact and approximate, throttle "
        "percentiles), <code>new_pids_per_window/</code>, <code>replay_windows/</code>, "
        "<code>replay_totals.parquet</code>, <code>state_over_time/</code>, <code>recommendations.parquet</code>.</p>",
    ]
    return "\n".join(parts)
