"""The report's answer: which default `producer_ids_rate` throttles only the users creating producers
far faster than the rest, and which throttles nobody, in the broker's unit and as values it accepts.

Per user, from the times its producer ids were new (minibroker.pipeline.jobs.new_pid_events):

* `needed`: the smallest producer_ids_rate under which the quota (its own slot arithmetic,
  minibroker.pipeline.model.needed_rate) admits every one of them, over the audit as recorded;
* `per_window`: what a whole window W (producer.id.quota.window.size.seconds) needs. An audit at
  least W long measures it (`needed`). A shorter one cannot: its count grows with its length. Then
  the need is measured at shorter windows inside the audit (span/16, span/8, span/4, span/2) and
  fitted as a burst plus a steady pace, n(w) = a + b w (least squares, a, b >= 0), and read at W: a
  user that opened 3 long-lived producers needs 3 however long the audit, one that opens a producer
  a second needs about 1.25 W per W (the quota counts up to one slot of W / layer count beyond W).
  Never less than what the audit itself needs.

Then: `outliers` are the users above the largest gap (at least `OUTLIER_GAP` x) between consecutive
`per_window` values; `throttle_rate` (X) is the smallest 1-2-5 value at least `HEADROOM` x the most
any other user needs, kept below what the outliers need; `nobody_rate` (Y) is the largest
`per_window`, rounded up to two significant digits. Both are checked against the broker's own
AlterClientQuotas validation (minibroker.quotas.config), and both are replayed as candidates, so the report's
first lines give the replay's exact counts for them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from minibroker.pipeline.model import needed_rate
from minibroker.protocol.errors import ErrorCode
from minibroker.quotas.config import QuotaConfigStore

__all__ = [
    "HEADROOM",
    "OUTLIER_GAP",
    "Answer",
    "accepted",
    "answer",
    "per_window_need",
    "round_up",
]

OUTLIER_GAP = 10.0  # a user needing 10x more than the next one is "creating producers far faster"
HEADROOM = 2.0  # X leaves the others twice what they needed


def accepted(rate: float) -> bool:
    """Whether the broker's AlterClientQuotas accepts this producer_ids_rate for the user default."""
    ((_, code, _),) = QuotaConfigStore().alter([([("user", None)], [("producer_ids_rate", float(rate), False)])],
                                               validate_only=True)
    return code == ErrorCode.none


def round_up(value: float, digits: int = 2) -> float:
    """`value` rounded up to `digits` significant digits (at least the value; 0 -> 1: any rate > 0
    admits a single producer id, and 1 is the smallest whole one)."""
    if value <= 0:
        return 1.0
    scale = 10 ** (math.floor(math.log10(value)) - digits + 1)
    out = math.ceil(value / scale - 1e-9) * scale
    return float(round(out, 12))


def _nice_at_least(value: float) -> float:
    """The smallest of 1, 2, 5, 10, 20, 50, ... (or below 1: 0.5, 0.2, 0.1, ...) that is >= value."""
    if value <= 0:
        return 1.0
    exponent = math.floor(math.log10(value))
    for e in (exponent, exponent + 1):
        for m in (1, 2, 5):
            candidate = float(round(m * 10 ** e, 12))
            if candidate >= value - 1e-12:
                return candidate
    return float(10 ** (exponent + 1))


def per_window_need(times_ms: np.ndarray, window_size_seconds: float, layer_count: int,
                    span_ms: int) -> tuple[float, float, bool]:
    """(needed over the audit, needed per whole window, estimated?) for one user's new-PID times in
    an audit `span_ms` long."""
    times = np.sort(np.asarray(times_ms, dtype=np.int64))
    needed = needed_rate(times, window_size_seconds, layer_count)
    window_ms = window_size_seconds * 1000
    span = max(int(span_ms), int(times[-1] - times[0]) if len(times) else 0)
    if span >= window_ms:
        return needed, needed, False
    if len(times) <= 1:
        return needed, needed, True
    # Up to half the audit: a longer window (plus the slot it may reach back) would run past its start.
    ws = np.array([span / 16, span / 8, span / 4, span / 2], dtype=float)
    ws = ws[ws >= max(1.0, layer_count)]  # the slot arithmetic needs a window of at least L ms
    if len(ws) < 2:
        return needed, needed, True
    ns = np.array([max(needed_rate(times, w / 1000, layer_count), 1.0) for w in ws])
    b, a = np.polyfit(ws, ns, 1)
    if b < 0:
        b, a = 0.0, float(ns.mean())
    if a < 0:
        a, b = 0.0, float((ws @ ns) / (ws @ ws))
    estimate = a + b * window_ms
    return needed, max(needed, float(estimate)), True


@dataclass
class Answer:
    """The report's first lines, before the replay counts are filled in."""

    users: pd.DataFrame  # principal, new_pids, needed_rate, per_window, estimated, outlier
    throttle_rate: float | None  # X: throttles only the outliers
    nobody_rate: float | None  # Y: throttles nobody
    outliers: list[str]
    window_size_seconds: float
    span_ms: int
    estimated: bool  # the audit is shorter than one window: per-window needs are estimated

    def basis(self) -> str:
        """What the recommendation is based on, in words."""
        length = _duration(self.span_ms / 1000)
        window = _duration(self.window_size_seconds)
        if not self.estimated:
            windows = self.span_ms / 1000 / self.window_size_seconds
            return (f"based on {length} of audit ({windows:,.1f} windows of {window}): the needs are measured, "
                    "not estimated")
        share = self.span_ms / 1000 / self.window_size_seconds
        return (f"based on {length} of audit, {share:.0%} of one {window} window: the needs over a whole window are "
                "estimated from each user's pace in the audit (a burst plus a steady rate)")


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:,.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:,.1f} min"
    return f"{seconds / 3600:,.1f} h"


def answer(needs: pd.DataFrame, window_size_seconds: float, span_ms: int) -> Answer:
    """From per-user needs (principal, new_pids, needed_rate, per_window, estimated)."""
    users = needs.sort_values("per_window", ascending=False, ignore_index=True).copy()
    users["outlier"] = False
    estimated = bool(users["estimated"].any()) if len(users) else span_ms < window_size_seconds * 1000
    if users.empty:
        return Answer(users, None, None, [], window_size_seconds, span_ms, estimated)
    values = users["per_window"].to_numpy(dtype=float)
    nobody = round_up(float(values[0]))
    outliers: list[str] = []
    throttle = None
    if len(values) >= 2:
        floor = np.maximum(values, 1.0)
        ratios = floor[:-1] / floor[1:]
        cut = int(np.argmax(ratios))
        if ratios[cut] >= OUTLIER_GAP:
            outliers = list(users["principal"].iloc[: cut + 1])
            users.loc[: cut, "outlier"] = True
            others = float(values[cut + 1])
            lowest_outlier = float(values[cut])
            throttle = _nice_at_least(max(others, 1.0) * HEADROOM)
            if throttle >= lowest_outlier:  # no room for headroom: just what the others need
                throttle = round_up(max(others, 1.0))
    for rate in (nobody, throttle):
        if rate is not None and not accepted(rate):
            raise ValueError(f"internal: producer_ids_rate {rate} would be refused by the broker")
    return Answer(users, throttle, nobody, outliers, window_size_seconds, span_ms, estimated)
