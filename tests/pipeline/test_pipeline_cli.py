"""`scripts/pipeline` as a user runs it, in its own process (its own JVM), against a running broker
with the audit on: with `--bootstrap-server` and no other flag it writes the report, printing a line
per stage; and the same command with `--master` runs on a Spark standalone cluster that
`scripts/spark_standalone` starts on 127.0.0.1 from the installed pyspark. That one starts four JVMs
(master, worker, driver, executor) and takes about 100 s on the shared 2-core machine, so it runs
only when asked: `MINIBROKER_SPARK_STANDALONE=1 scripts/test tests/pipeline/test_pipeline_cli.py`.

(The tests run `python -m minibroker.pipeline.cli`, which is what scripts/pipeline execs once its venv is
there; Spark's web UI gets port 0 through PYSPARK_SUBMIT_ARGS, as tests must not take fixed ports.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from minibroker.testing import running_broker

ROOT = Path(__file__).resolve().parents[2]
USERS = {"carol": "carol-secret", "dave": "dave-secret"}
pytestmark = pytest.mark.interop


def _env() -> dict[str, str]:
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DRIVER_MEMORY": "1g",
            "PYSPARK_SUBMIT_ARGS": "--conf spark.ui.port=0 pyspark-shell", "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    """A running broker with the audit on: carol opens a new idempotent producer per batch, dave
    keeps one; the audit is flushed before the pipeline reads it."""
    from confluent_kafka import Producer

    data = tmp_path_factory.mktemp("audited") / "data"
    with running_broker(data, sasl_users=USERS, audit_enable="true", audit_flush_interval_ms="100") as broker:
        def producer(user, client):
            return Producer({"bootstrap.servers": broker.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": USERS[user],
                             "client.id": client, "enable.idempotence": True, "linger.ms": 0})

        dave = producer("dave", "dave")
        for i in range(12):
            carol = producer("carol", f"carol-{i}")
            carol.produce("orders", b"c%d" % i)
            carol.flush(10)
            dave.produce("orders", b"d%d" % i)
        dave.flush(10)
        broker.in_broker(lambda: broker.broker.audit.flush(0))
        yield broker


def run_pipeline(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "minibroker.pipeline.cli", *args], cwd=cwd, env=_env(), capture_output=True,
                            text=True, timeout=480)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def check_report(result: subprocess.CompletedProcess, report: Path) -> None:
    out = result.stdout
    for stage in ("read", "summary", "new_pids", "replay", "replay_tables", "plots"):
        assert f"[pipeline] {stage} " in out, stage
    assert "audit events, 1 quota record(s)" in out  # the broker's start, recorded in the audit
    headline = "A default producer_ids_rate of"
    assert headline in out and "throttles only carol (" in out and "throttles nobody" in out
    page = (report / "index.html").read_text()
    assert headline in page and "observed (what the broker decided)" in page
    totals = pq.read_table(report / "replay_totals.parquet").to_pandas()
    assert set(totals.principal) == {"User:carol", "User:dave"}
    assert totals[totals.setting == "broker's quotas"].mismatched_events.sum() == 0


def test_the_pipeline_reads_a_running_broker_with_no_other_flag(audited, tmp_path):
    result = run_pipeline(tmp_path, "--bootstrap-server", audited.bootstrap)
    check_report(result, tmp_path / "report")  # ./report: the default
    assert "local[*]" in result.stdout


@pytest.mark.skipif(os.environ.get("MINIBROKER_SPARK_STANDALONE") != "1",
                    reason="a Spark standalone cluster (about 100 s): MINIBROKER_SPARK_STANDALONE=1 runs it")
def test_the_same_command_on_a_standalone_cluster(audited, tmp_path):
    from minibroker.pipeline.standalone import start, status, stop

    state = tmp_path / "spark"
    try:
        url = start(state, cores=2, memory="1g")
        assert url.startswith("spark://127.0.0.1:") and all(status(state).values())
        result = run_pipeline(tmp_path, "--bootstrap-server", audited.bootstrap, "--master", url)
        check_report(result, tmp_path / "report")
        assert f"Spark {url}" in result.stdout
        # The work ran on the cluster's executor, not in the driver.
        assert list((state / "work").glob("app-*/*/stderr"))
    finally:
        stop(state)
    assert not any(status(state).values())
