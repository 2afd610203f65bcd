"""The pipeline says what is missing instead of answering without it: no audit (a broker started
without audit.enable=true) is an exit 1 that says how to turn it on, before any JVM starts; the
report's words for anonymous users, single producer ids, long throttles and its window; a quota
change lists only the keys it changed. Spark-free: the report's whole run on such audits is in
test_pipeline_shapes.py."""

from __future__ import annotations

import pytest

from minibroker.pipeline import cli
from minibroker.pipeline.report import duration_text, need_text, pick_window_ms, principal_notes
from minibroker.pipeline.timeline import QuotaTimeline
from minibroker.testing import running_broker


def run_cli(capsys, *argv):
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_broker_without_the_audit_is_an_error_naming_audit_enable(broker, tmp_path, capsys):
    out = tmp_path / "report"
    code, stdout, stderr = run_cli(capsys, "--bootstrap-server", broker.bootstrap, "--out", str(out))
    assert code == 1
    assert f"no audit on {broker.bootstrap}: the topic __minibroker_audit does not exist" in stderr
    assert "audit.enable=true" in stderr and "scripts/serve --override audit.enable=true" in stderr
    assert not out.exists() and stdout == ""  # stopped before Spark: nothing read, nothing written


def test_a_data_dir_without_the_audit_is_the_same_error(broker, tmp_path, capsys):
    code, _, stderr = run_cli(capsys, "--data-dir", str(broker.data_dir), "--out", str(tmp_path / "report"))
    assert code == 1
    assert f"no audit in the data dir {broker.data_dir}" in stderr and "audit.enable=true" in stderr


def test_with_the_audit_on_the_audit_is_there(tmp_path):
    with running_broker(tmp_path / "data", audit_enable="true") as running:
        running.in_broker(lambda: running.broker.audit.flush(0))
        args = cli.parser().parse_args(["--bootstrap-server", running.bootstrap])
        assert cli.missing_audit(args, running.bootstrap) is None
        args = cli.parser().parse_args(["--data-dir", str(running.data_dir)])
        assert cli.missing_audit(args, cli.DEFAULT_BOOTSTRAP) is None
    assert cli.missing_audit(cli.parser().parse_args(["--trace", "t.parquet"]), cli.DEFAULT_BOOTSTRAP) is None


def test_per_user_answers_need_authenticated_users():
    (only,) = principal_notes(["User:ANONYMOUS"])
    assert "per-user answers need authenticated users" in only and "--sasl-listen" in only
    (mixed,) = principal_notes(["User:ANONYMOUS", "User:alice"])
    assert mixed.startswith("Requests by User:ANONYMOUS") and "count as one user" in mixed
    assert principal_notes(["User:alice", "User:bob"]) == [] and principal_notes([]) == []


@pytest.mark.parametrize(("rate", "text"), [(0.0, "any (1)"), (1.0, "1"), (2.5, "2.5"), (910_000.0, "910,000"),
                                            (float("nan"), "–")])
def test_needs_read_any_for_a_single_producer_id(rate, text):
    assert need_text(rate) == text


@pytest.mark.parametrize(("ms", "text"), [(0, "0 ms"), (850, "850 ms"), (12_500, "12.5 s"), (119_000, "119.0 s"),
                                          (4_403_823, "73.4 min"), (7_560_000, "2.1 h")])
def test_durations_in_their_unit(ms, text):
    assert duration_text(ms) == text


@pytest.mark.parametrize(("span_ms", "window_ms"), [
    (0, 100), (500, 100), (20_000, 200), (60_000, 1_000), (25 * 60_000, 15_000),
    (int(4.2 * 3_600_000), 300_000), (30 * 86_400_000, 43_200_000), (400 * 86_400_000, 86_400_000),
])
def test_the_window_is_picked_from_the_audits_length(span_ms, window_ms):
    assert pick_window_ms(span_ms) == window_ms
    assert span_ms / window_ms <= 100 or window_ms == 86_400_000


def test_a_change_lists_only_the_keys_it_changed():
    """The audit records an altered entity's whole configuration: alice had producer_byte_rate and
    the operator added producer_ids_rate; bob had nothing and got producer_ids_rate; then alice's
    producer_byte_rate was removed. Only those are steps; nothing is "removed" that was never set."""
    start = {"ts": 0, "seq": 0, "api": "QuotaConfig", "principal": "", "quota_settings": {},
             "quotas": [{"entity": {"user": "alice"}, "values": {"producer_byte_rate": 1000.0}}]}

    def alter(ts, user, values):
        return {"ts": ts, "seq": ts, "api": "AlterClientQuotas", "principal": "User:admin", "quota_settings": None,
                "quotas": [{"entity": {"user": user}, "values": values}]}

    timeline = QuotaTimeline.from_records([
        start,
        alter(10, "alice", {"producer_byte_rate": 1000.0, "producer_ids_rate": 5.0}),
        alter(20, "bob", {"producer_ids_rate": 2.0}),
        alter(30, "alice", {"producer_ids_rate": 5.0}),
        alter(40, "alice", {"producer_ids_rate": 5.0}),  # set again to what it was
    ])
    assert [step.quotas for step in timeline.steps] == [
        (("alice", "producer_byte_rate", 1000.0),),
        (("alice", "producer_ids_rate", 5.0),),
        (("bob", "producer_ids_rate", 2.0),),
        (("alice", "producer_byte_rate", None),),
        (),
    ]
    assert timeline.final_quotas() == {("alice", "producer_ids_rate"): 5.0, ("bob", "producer_ids_rate"): 2.0}
