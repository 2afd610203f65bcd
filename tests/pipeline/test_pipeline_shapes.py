"""The report on every shape of audit the broker can write, each through the whole pipeline (a data
dir written by the broker's own AuditLog, read, replayed, plotted): no crash, and the first lines say
what is true of it.

* empty: a broker that started (its quota configuration recorded) and served nothing yet;
* no idempotent producers (confluent-kafka's default, or consumers only): the plot of new producer
  ids once crashed on it (NaN);
* a single user, anonymous (every client on a PLAINTEXT listener is User:ANONYMOUS): a line says that
  per-user answers need authenticated users, and the report's window is picked from the audit's length;
* quotas changed in the middle: the broker's recorded quotas are replayed as they changed, the
  replay agrees with what the broker decided ("observed"), and flags that disagree with the recorded
  window settings are flagged; a change lists only the keys it changed, durations read in their unit,
  a user with one producer id needs "any (1)".
"""

from __future__ import annotations

from minibroker.audit import AuditLog
from minibroker.pipeline.read import read_data_dir
from minibroker.pipeline.report import OBSERVED, build_report
from minibroker.storage.audit_format import audit_event, quota_config_event
from minibroker.storage.config import LogConfig
from minibroker.storage.manager import LogManager

T0 = 1_767_225_600_000
SETTINGS = {"producer.id.quota.window.size.seconds": 1.0, "producer.id.quota.cache.layer.count": 2.0,
            "producer.id.quota.cache.false.positive.rate": 0.001, "quota.window.num": 11.0,
            "quota.window.size.seconds": 1.0, "producer.id.expiration.ms": 86_400_000.0}


def start(ts=0, quotas=()):
    return quota_config_event(ts=T0 + ts, quotas=list(quotas), settings=SETTINGS)


def alter(ts, user, values):
    return quota_config_event(ts=T0 + ts, quotas=[{"entity": {"user": user}, "values": values}], settings=SETTINGS,
                              principal="User:admin", client_id="admin", listener="PLAINTEXT", api_version=1)


def produce(ts, principal, pid=-1, *, partition=0, client="c", error=0, throttle=0, quota="", pid_new=None):
    return audit_event(ts=T0 + ts, principal=principal, client_id=client, listener="PLAINTEXT", api="Produce",
                       api_key=0, api_version=9, topic="t", partition=partition, bytes=100, records=1,
                       producer_id=pid, producer_epoch=0 if pid >= 0 else -1, error_code=error,
                       throttle_time_ms=throttle, throttle_quota=quota, pid_new=pid_new)


def fetch(ts, principal):
    return audit_event(ts=T0 + ts, principal=principal, client_id="consumer", listener="PLAINTEXT", api="Fetch",
                       api_key=1, api_version=16, topic="t", partition=0, bytes=500, records=5)


def report(spark, tmp_path, events, window_ms=1000, **kwargs):
    data = tmp_path / "data"
    logs = LogManager.open(data, LogConfig.from_broker({}), T0)
    audit = AuditLog(logs)
    for event in events:
        audit.record(event)
    audit.close(T0)
    logs.close()
    out = tmp_path / "report"
    result = build_report(read_data_dir(spark, data), out=out, source=str(data), window_ms=window_ms, **kwargs)
    return result, (out / "index.html").read_text()


def test_an_empty_audit_a_broker_that_only_started(spark, tmp_path):
    result, page = report(spark, tmp_path, [start(quotas=[{"entity": {"user": None},
                                                            "values": {"producer_ids_rate": 10.0}}])])
    assert result.events == 0 and result.timeline.complete
    assert result.headline[0].startswith("The audit holds no decisions yet:")
    assert "No decisions in the audit" in page and "default user: producer_ids_rate=10" in page


def test_an_audit_without_idempotent_producers(spark, tmp_path):
    events = [start()] + [produce(i * 10, "User:alice", partition=i % 2) for i in range(30)]
    events += [fetch(i * 10 + 5, "User:bob") for i in range(10)]
    result, page = report(spark, tmp_path, events)
    assert result.events == 40
    assert result.headline == ["No producer ids in this audit (30 produce batches, none from an idempotent "
                               "producer): a producer_ids_rate throttles nobody, whatever its value."]
    assert result.answer.nobody_rate is None and "No producer IDs in this audit" in page
    totals = result.totals.set_index(["setting", "principal"])
    assert totals.loc[("no quota", "User:alice"), "produce_requests"] == 30
    assert (tmp_path / "report" / "pids_per_window.png").stat().st_size > 0


def test_a_single_user(spark, tmp_path):
    """One user, three long-lived producers: nobody to single out; the smallest whole rate that
    admits its three new producer ids throttles nobody, and the replay confirms it. The user is
    ANONYMOUS (PLAINTEXT clients): the report says that per-user answers need authenticated users.
    Its 3 s are cut into 100 ms windows (at most 100 of them)."""
    events = [start()] + [produce(i * 50, "User:ANONYMOUS", 100 + i % 3, partition=i % 4) for i in range(60)]
    result, page = report(spark, tmp_path, events, window_ms=None)
    (note,) = [n for n in result.notes if "authenticated users" in n]
    assert note.startswith("Every request in this audit is by User:ANONYMOUS") and note in page
    assert result.window_ms == 100 and result.window_picked
    assert "Report windows: 100 ms (picked from the audit's length" in page
    assert result.answer.outliers == [] and result.answer.throttle_rate is None
    assert result.answer.nobody_rate == 3
    assert result.headline[0] == ("No user creates producer ids far faster than the others: a default "
                                  "producer_ids_rate of 3 throttles nobody.")
    totals = result.totals.set_index(["setting", "principal"])
    assert totals.loc[("producer_ids_rate=3", "User:ANONYMOUS"), "pid_rejected_batches"] == 0
    assert totals.loc[("producer_ids_rate=3", "User:ANONYMOUS"), "new_pids"] == 3
    assert result.headline[0] in page


def test_quotas_changed_in_the_middle(spark, tmp_path):
    """Recorded: W = 1 s in 2 slots; alice starts with producer_ids_rate 1; at 1000 the operator raises
    it to 5. What the broker decided (worked out by hand): PID 1 at 0 admitted; PID 2 at 100 new and
    throttled until slot 0 leaves the lookback (1499 - 100 = 1399 ms); PID 1 at 300 known; after the
    raise PIDs 3, 4, 5 at 1100 and PID 2's retry at 1200 admitted (slot 0's one admission plus four
    stay under 5). bob has no quota. The replay of the broker's recorded quotas agrees with every
    one of those decisions."""
    alice = "User:alice"
    events = [
        start(quotas=[{"entity": {"user": "alice"}, "values": {"producer_ids_rate": 1.0}}]),
        produce(0, alice, 1, pid_new=True),
        produce(100, alice, 2, pid_new=True, error=19, throttle=1399, quota="producer_ids_rate"),
        produce(300, alice, 1, pid_new=False),
        produce(400, "User:bob", 9, client="b"),
        alter(1000, "alice", {"producer_ids_rate": 5.0}),
        produce(1100, alice, 3, pid_new=True), produce(1100, alice, 4, partition=1, pid_new=True),
        produce(1100, alice, 5, partition=2, pid_new=True),
        produce(1200, alice, 2, pid_new=True),
        produce(1300, "User:bob", 9, client="b"),
    ]
    result, page = report(spark, tmp_path, events, flags={"pid_window_size_seconds": 60.0})
    steps = result.timeline.steps
    # The audit records alice's whole configuration after the change; only what changed is a step.
    assert [s.start for s in steps] == [True, False] and steps[1].quotas == (("alice", "producer_ids_rate", 5.0),)
    totals = result.totals.set_index(["setting", "principal"])
    observed, replayed = totals.loc[(OBSERVED, alice)], totals.loc[("broker's quotas", alice)]
    assert observed.pid_rejected_batches == replayed.pid_rejected_batches == 1
    assert observed.max_throttle_ms == replayed.max_throttle_ms == 1399
    assert observed.new_pids == replayed.new_pids == 5
    assert replayed.mismatched_events == 0 and not any(n.startswith("MISMATCH: replaying") for n in result.notes)
    assert "AlterClientQuotas by User:admin" in page and "user alice: producer_ids_rate=5" in page
    assert "removed" not in page
    assert "<td>1.4 s</td>" in page and "1,399" not in page  # the longest throttle, in its unit
    # bob made one producer id: any rate admits it.
    assert "<td>bob</td><td>1</td><td>any (1)</td><td>any (1)</td>" in page and ">0<" not in page.split(
        "What each user needs")[1].split("</table>")[0]
    # The flag given disagrees with the recorded window: flagged, on the page too.
    (flag,) = [n for n in result.notes if n.startswith("MISMATCH")]
    assert "producer.id.quota.window.size.seconds=60 (recorded 1)" in flag and "class='flag'" in page

