"""Apache Kafka 4.4 itself, run beside minibroker as the reference (the conformance corpus in
tests/conformance/, scripts/conformance, the benchmarks' Kafka column).

The jars come from scripts/install_kafka (scripts/test runs it) in .cache/kafka-reference/libs (or
$MINIBROKER_KAFKA_REFERENCE/libs). `running_kafka()` formats a fresh storage directory
(kafka.tools.StorageTool, what `kafka-storage.sh format` runs), starts one KRaft node - broker and
controller in one JVM, node.id 1 as minibroker's - on 127.0.0.1 with free ports, waits until it
answers Metadata with itself as a broker, and stops it with SIGTERM (Kafka's clean shutdown) when
the block ends.

Two JVM profiles: "test" starts fast (one GC thread, C1 only, a small heap: about 3 s to ready on
2 cores), "bench" is what kafka-server-start.sh runs (G1, a 1 GiB heap, C2) so that throughput is
measured as Kafka's users run it.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping

ROOT = Path(__file__).resolve().parents[2]
KAFKA_VERSION = "4.4.0"
CACHE = Path(os.environ.get("MINIBROKER_KAFKA_REFERENCE", ROOT / ".cache" / "kafka-reference"))
LIBS = CACHE / "libs"
HOW_TO_GET = "run scripts/install_kafka (scripts/test runs it) to resolve Kafka's jars from Maven Central"
NODE_ID = 1  # minibroker's default node.id, so ids need no normalising
# The `kafka_reference` fixture's and the corpus's SASL users.
SASL_USERS = {"alice": "alice-secret", "bob": "bob-secret"}
# Both brokers of the corpus run Kafka's authorizer with the principals of the other scenarios (PLAINTEXT
# is User:ANONYMOUS, SASL's alice) as super users, so that ACLs change nothing for them; bob is no super
# user: the acls/ scenarios show what each API refuses him.
REFERENCE_SECURITY = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                      "super.users": "User:ANONYMOUS;User:alice"}

JVM_PROFILES = {
    # Start-up dominates a test session: a serial GC, no C2, a small heap (Kafka's own tests run
    # brokers in 1 GB of heap with dozens of them in one JVM).
    "test": ["-Xms128m", "-Xmx768m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k"],
    # kafka-server-start.sh's KAFKA_HEAP_OPTS and kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS.
    "bench": ["-Xmx1G", "-Xms1G", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
              "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
              "-XX:MaxInlineLevel=15"],
}

# The broker's settings for one node. Replication factors of the internal topics are 1 (one broker);
# group.initial.rebalance.delay.ms is 0 as in Kafka's own config/server.properties (and minibroker's
# default; docs/differences.md). Everything else is Kafka's default unless a caller overrides it.
BASE_CONFIG = {
    "process.roles": "broker,controller",
    "node.id": str(NODE_ID),
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
}

LOG4J = """Configuration:
  Appenders:
    File:
      name: FILE
      fileName: "{log}"
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: FILE
    Logger:
      - name: kafka.server.BrokerServer
        level: INFO
        additivity: false
        AppenderRef:
          - ref: FILE
"""


class KafkaReferenceError(Exception):
    pass


def installed() -> bool:
    return (LIBS / f"kafka_2.13-{KAFKA_VERSION}.jar").is_file() and shutil.which("java") is not None


def _classpath() -> str:
    return f"{LIBS}{os.sep}*"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _cluster_id() -> str:
    """A random cluster id as Kafka's Uuid.randomUuid makes one: never starting with "-", which
    kafka-storage's argument parser would take for an option (a format failing 1 start in 64)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


@dataclass
class KafkaProcess:
    proc: subprocess.Popen
    bootstrap: str
    data_dir: Path
    cluster_id: str
    sasl_bootstrap: str | None = None
    seconds_to_ready: float = 0.0  # from the JVM's start (storage formatted) to Metadata answered
    log_file: Path = field(default_factory=Path)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def cpu_seconds(self) -> float:
        from minibroker.testing import process_cpu

        user, system, _ = process_cpu(self.proc.pid)
        return user + system

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (Kafka's clean shutdown), SIGKILL after `timeout` seconds."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _properties(values: Mapping[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in values.items())


def _format(config_file: Path, cluster_id: str, scram_users: Mapping[str, str], log_file: Path) -> None:
    args = ["java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto", "-cp", _classpath(),
            "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(config_file), "--ignore-formatted"]
    for name, password in scram_users.items():
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            args += ["--add-scram", f"{mechanism}=[name={name},password={password}]"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        log_file.write_text(proc.stdout + proc.stderr)
        raise KafkaReferenceError(f"kafka-storage format failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


def _wait_ready(kafka: KafkaProcess, timeout: float) -> None:
    """Until the broker answers Metadata naming itself (its acceptors start last, once unfenced)."""
    from kio.index import load_request_schema

    from tests.support.wire import WireClient

    deadline = time.monotonic() + timeout
    host, port = kafka.bootstrap.rsplit(":", 1)
    while True:
        if kafka.proc.poll() is not None:
            raise KafkaReferenceError(f"Kafka exited with {kafka.proc.returncode} before it was ready:\n"
                                      f"{kafka.log_tail()}")
        if time.monotonic() > deadline:
            raise KafkaReferenceError(f"Kafka was not ready within {timeout:.0f} s:\n{kafka.log_tail()}")
        try:
            with WireClient(kafka.bootstrap, timeout=5) as client:
                metadata = load_request_schema(3, 12)
                response = client.request(metadata(topics=(), allow_auto_topic_creation=False,
                                                   include_topic_authorized_operations=False))
                if any(b.node_id == NODE_ID for b in response.brokers):
                    return
        except (OSError, ConnectionError):
            pass
        time.sleep(0.05)


def start_kafka(data_dir: Path, *, overrides: Mapping[str, str] | None = None,
                sasl_users: Mapping[str, str] | None = None, profile: str = "test",
                ready_timeout: float = 120.0) -> KafkaProcess:
    """Format `data_dir` and start Kafka on it (see the module docstring); the caller stops it.

    `sasl_users` adds a SASL_PLAINTEXT listener (PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, those
    users for each), as minibroker's running_broker(sasl_users=...) does."""
    if not installed():
        raise KafkaReferenceError(f"Kafka {KAFKA_VERSION} is not installed in {LIBS}: {HOW_TO_GET}")
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    last_error: Exception | None = None
    for _attempt in range(3):  # a port picked free may be taken before Kafka binds it
        ports = {name: _free_port() for name in ("PLAINTEXT", "CONTROLLER", "SASL_PLAINTEXT")}
        listeners = {"PLAINTEXT": ports["PLAINTEXT"], "CONTROLLER": ports["CONTROLLER"]}
        config = {**BASE_CONFIG, "log.dirs": str(data_dir / "logs"),
                  "controller.quorum.voters": f"{NODE_ID}@127.0.0.1:{ports['CONTROLLER']}"}
        protocols = {"PLAINTEXT": "PLAINTEXT", "CONTROLLER": "PLAINTEXT"}
        if sasl_users:
            listeners["SASL_PLAINTEXT"] = ports["SASL_PLAINTEXT"]
            protocols["SASL_PLAINTEXT"] = "SASL_PLAINTEXT"
            plain_users = " ".join(f'user_{name}="{password}"' for name, password in sasl_users.items())
            config.update({
                "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                    f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};",
                **{f"listener.name.sasl_plaintext.scram-sha-{bits}.sasl.jaas.config":
                   "org.apache.kafka.common.security.scram.ScramLoginModule required;" for bits in (256, 512)},
            })
        config["listeners"] = ",".join(f"{name}://127.0.0.1:{port}" for name, port in listeners.items())
        config["advertised.listeners"] = ",".join(
            f"{name}://127.0.0.1:{port}" for name, port in listeners.items() if name != "CONTROLLER")
        config["listener.security.protocol.map"] = ",".join(f"{n}:{p}" for n, p in protocols.items())
        config.update(overrides or {})
        config_file = data_dir / "server.properties"
        config_file.write_text(_properties(config))
        log_file = data_dir / "kafka.log"
        (data_dir / "log4j2.yaml").write_text(LOG4J.format(log=log_file))
        shutil.rmtree(data_dir / "logs", ignore_errors=True)
        cluster_id = _cluster_id()
        _format(config_file, cluster_id, sasl_users or {}, log_file)
        started = time.monotonic()
        with open(data_dir / "kafka.out", "wb") as out:
            proc = subprocess.Popen(
                ["java", *JVM_PROFILES[profile], "-Djava.awt.headless=true",
                 f"-Dlog4j2.configurationFile={data_dir / 'log4j2.yaml'}", "-cp", _classpath(),
                 "kafka.Kafka", str(config_file)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        kafka = KafkaProcess(
            proc, f"127.0.0.1:{ports['PLAINTEXT']}", data_dir, cluster_id,
            sasl_bootstrap=f"127.0.0.1:{ports['SASL_PLAINTEXT']}" if sasl_users else None, log_file=log_file)
        try:
            _wait_ready(kafka, ready_timeout)
        except KafkaReferenceError as exc:
            kafka.stop(timeout=10)
            last_error = exc
            if "Address already in use" in (log_file.read_text(errors="replace") if log_file.exists() else ""):
                continue
            raise
        kafka.seconds_to_ready = time.monotonic() - started
        return kafka
    assert last_error is not None
    raise last_error


@contextlib.contextmanager
def running_kafka(data_dir: Path | str | None = None, **kwargs) -> Iterator[KafkaProcess]:
    """`start_kafka` until the block ends (in a temporary directory unless `data_dir` is given)."""
    with contextlib.ExitStack() as stack:
        if data_dir is None:
            data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="kafka-reference-"))
        kafka = start_kafka(Path(data_dir), **kwargs)
        try:
            yield kafka
        finally:
            kafka.stop()
