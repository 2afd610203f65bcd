"""Share consumers in tests: the admin requests and records every share test starts from
(`setup`, `produce`, `lag`), and the real Java share consumer (KafkaShareConsumer, through tests/java/ShareClient.java) as a test
helper, with the jars tests/support/java_client.py finds (scripts/fetch_java_clients installs them;
without them the tests fail, they do not skip). ShareClient is compiled once per pytest session (the
`share_java` fixture in tests/conftest.py); `run` runs commands in one JVM and returns its output
lines, `start` runs them in the background (for a test that acts while the consumers poll: stops the
JVM, kills a broker).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from confluent_kafka import Producer

from minibroker.admin_client import AdminClient
from tests.support.java_client import HOW_TO_GET, JARS, JVM_OPTS, LIBS, JavaClientError

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tests" / "java" / "ShareClient.java"


def _args(commands: tuple[list, ...]) -> list[str]:
    args: list[str] = []
    for command in commands:
        args += (["--"] if args else []) + [str(a) for a in command]
    return args


class ShareRun:
    """A ShareClient JVM in the background: its output lines collected as they come."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.lines: list[dict] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            if raw.startswith("{"):
                self.lines.append(json.loads(raw))

    def wait_for(self, predicate, timeout: float = 60) -> None:
        """Until `predicate(lines)` holds (AssertionError naming the lines after `timeout`)."""
        deadline = time.monotonic() + timeout
        while not predicate(self.lines):
            if time.monotonic() > deadline or self.proc.poll() is not None and not predicate(self.lines):
                raise AssertionError(f"ShareClient did not get there ({self.proc.poll()=}): {self.lines[-5:]}")
            time.sleep(0.05)

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def finish(self, timeout: float = 120) -> list[dict]:
        """Wait for the JVM to end (killed if it takes longer); its lines."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.lines

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.finish()


class ShareJava:
    def __init__(self, classes: Path) -> None:
        self.classpath = f"{classes}:{LIBS}/*"

    def _command(self, commands: tuple[list, ...]) -> list[str]:
        return ["java", *JVM_OPTS, "-cp", self.classpath, "ShareClient", *_args(commands)]

    def run(self, *commands: list, timeout: float = 180) -> list[dict]:
        proc = subprocess.run(self._command(commands), capture_output=True, text=True, timeout=timeout)
        lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0:
            stderr = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("SLF4J"))
            raise AssertionError(f"ShareClient exited {proc.returncode}:\n{stderr[-4000:]}")
        return lines

    def start(self, *commands: list) -> ShareRun:
        return ShareRun(subprocess.Popen(self._command(commands), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                         text=True))


def compile_share_client(classes: Path) -> ShareJava:
    missing = [jar for jar in JARS if not (LIBS / jar).is_file()]
    if shutil.which("javac") is None or shutil.which("java") is None:
        raise JavaClientError(f"no JDK (javac) on PATH: {HOW_TO_GET}")
    if missing:
        raise JavaClientError(f"missing {', '.join(missing)} in {LIBS}: {HOW_TO_GET}")
    proc = subprocess.run(["javac", "-d", str(classes), "-cp", f"{LIBS}/*", str(SOURCE)],
                          capture_output=True, text=True, timeout=180)
    if proc.returncode != 0:
        raise JavaClientError(f"javac failed (a JDK >= 17 is needed; {HOW_TO_GET}):\n{proc.stderr}")
    return ShareJava(classes)


def records(lines: list[dict]) -> list[dict]:
    return [line for line in lines if line["type"] == "record"]


# -- what every share-consumer test does -------------------------------------------------------------


def produce(bootstrap: str, topic: str, count: int, per_batch: int = 10, start: int = 0) -> None:
    """`count` records "v<i>" (key "k<i>"), flushed every `per_batch` so they land in separate batches."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(start, start + count):
        producer.produce(topic, f"v{i}".encode(), key=f"k{i}".encode())
        if (i + 1) % per_batch == 0:
            producer.flush()
    producer.flush()


# Every test group reads from the start, and heartbeats every 200 ms: a joining member's partitions
# come with its second heartbeat (the first initializes them), so this is its wait for them.
FAST = {"share.auto.offset.reset": "earliest", "share.heartbeat.interval.ms": "200"}


def setup(admin: AdminClient, topic: str, group: str, partitions: int = 1, **configs: str) -> None:
    created = admin.call(19, {"topics": [{"name": topic, "num_partitions": partitions, "replication_factor": 1,
                                          "assignments": [], "configs": []}], "timeout_ms": 5000, "validate_only": False})
    assert created.topics[0].error_code == 0
    configs = {**FAST, **configs}
    altered = admin.call(44, {"resources": [{"resource_type": 32, "resource_name": group, "configs": [
        {"name": k, "config_operation": 0, "value": v} for k, v in configs.items()]}], "validate_only": False})
    assert altered.responses[0].error_code == 0, altered.responses[0].error_message


def lag(admin: AdminClient, group: str) -> dict[int, int]:
    described = admin.call(90, {"groups": [{"group_id": group, "topics": None}]})
    return {p.partition_index: p.lag for t in described.groups[0].topics for p in t.partitions}


def setup_group(admin: AdminClient, group: str) -> None:
    altered = admin.call(44, {"resources": [{"resource_type": 32, "resource_name": group, "configs": [
        {"name": k, "config_operation": 0, "value": v} for k, v in FAST.items()]}], "validate_only": False})
    assert altered.responses[0].error_code == 0, altered.responses[0].error_message


def split_commands(lines: list[dict]) -> list[list[dict]]:
    """The output lines of each command of one JVM run, split at its "done" lines."""
    out: list[list[dict]] = [[]]
    for line in lines:
        if line["type"] == "done":
            out.append([])
        else:
            out[-1].append(line)
    return out[:-1]
