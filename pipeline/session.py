"""The SparkSession the pipeline runs on: embedded `local[*]` by default, any master unchanged
(`spark://HOST:PORT` for a standalone cluster: scripts/spark_standalone starts one).

Python workers must run the project's interpreter (pyspark, pandas, pyarrow and this repository's
packages are installed there), so `PYSPARK_PYTHON` defaults to `sys.executable`, and they import this
repository's packages from `PYTHONPATH` (set here for local workers and, through
`spark.executorEnv.PYTHONPATH`, for a cluster's executors: its workers must see this directory). The
driver binds to 127.0.0.1 unless `SPARK_LOCAL_IP` says otherwise (a machine whose host name does not
resolve, or that has no network but loopback, still works).

Spark's web UI and its console progress bar are on (as in spark-submit) unless `quiet`; `conf`
(`scripts/pipeline --conf key=value`) is applied last, so it can change anything set here.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

# The folder the package `minibroker` is found in (found, not imported: the pipeline stays apart from
# the broker): the repository (the editable install maps the rest of the package there) or
# site-packages.
_SPEC = importlib.util.find_spec("minibroker")
assert _SPEC is not None and _SPEC.origin is not None
ROOT = Path(_SPEC.origin).resolve().parents[1]


def spark_session(
    master: str = "local[*]",
    app_name: str = "minibroker-pipeline",
    *,
    shuffle_partitions: int | None = None,
    conf: dict[str, str] | None = None,
    quiet: bool = False,
) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Executors started by this driver import `minibroker` (its pipeline, quotas, storage) from here.
    path = os.environ.get("PYTHONPATH", "")
    if str(ROOT) not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), path) if p)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false" if quiet else "true")
        .config("spark.ui.showConsoleProgress", "false" if quiet else "true")
        .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
        .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", os.environ.get("SPARK_DRIVER_MEMORY", "4g"))
    )
    if shuffle_partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def cpu_seconds_probe(spark: SparkSession):
    """For a local master: a function returning the CPU seconds used so far by Spark's JVM and its
    Python workers (the process tree under the JVM, reaped children included; Linux /proc), so a
    stage can say how many cores it kept busy. None where that cannot be measured."""
    if not spark.sparkContext.master.startswith("local") or not Path("/proc/self/stat").exists():
        return None
    try:
        root = spark.sparkContext._gateway.proc.pid  # the JVM py4j started for this driver
    except AttributeError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")

    def tree_cpu() -> float:
        children: dict[int, list[int]] = {}
        times: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            pid = int(entry)
            children.setdefault(int(fields[1]), []).append(pid)
            times[pid] = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
        total, stack = 0, [root]
        while stack:
            pid = stack.pop()
            total += times.get(pid, 0)
            stack.extend(children.get(pid, ()))
        return total / ticks

    return tree_cpu
