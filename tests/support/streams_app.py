"""Kafka Streams applications (tests/java/StreamsApps.java, Apache Kafka's kafka-streams) as a test helper.

The jars are Kafka's Java clients and Streams library at the version tests/java/pom.xml names, with
their runtime dependencies, from Maven Central, in MINIBROKER_JAVA_CLIENTS (else .cache/java-clients)
under kafka-clients-<version>/, the layout scripts/fetch_java_clients fills; when they are not there
yet they are resolved the same way here (`mvn dependency:copy-dependencies` on the pom into a
temporary directory, renamed when complete, a stamp naming the pom). StreamsApps is compiled once
per test session (the `streams` fixture); each application runs in a JVM of its own, until stopped.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from pathlib import Path

from tests.support.java_client import JVM_OPTS, JavaClientError

ROOT = Path(__file__).resolve().parents[2]
POM = ROOT / "tests" / "java" / "pom.xml"
SOURCE = ROOT / "tests" / "java" / "StreamsApps.java"
CACHE = Path(os.environ.get("MINIBROKER_JAVA_CLIENTS", ROOT / ".cache" / "java-clients"))


def kafka_version() -> str:
    match = re.search(r"<kafka.version>([^<]+)</kafka.version>", POM.read_text())
    if match is None:
        raise JavaClientError(f"no <kafka.version> in {POM}")
    return match.group(1)


def ensure_jars() -> Path:
    """The directory of the Streams jars, resolved from Maven Central when missing."""
    version = kafka_version()
    libs = CACHE / f"kafka-clients-{version}"
    want = hashlib.sha256(POM.read_bytes()).hexdigest()
    stamp = libs / ".resolved"
    if (libs / f"kafka-streams-{version}.jar").is_file() and stamp.is_file() and stamp.read_text().strip() == want:
        return libs
    if shutil.which("mvn") is None:
        raise JavaClientError("no mvn on PATH: run scripts/fetch_java_clients (it installs Maven) first")
    CACHE.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".resolve.", dir=CACHE))
    try:
        proc = subprocess.run(["mvn", "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
                               "-DincludeScope=runtime", f"-DoutputDirectory={work / 'libs'}"],
                              capture_output=True, text=True, timeout=900)
        if proc.returncode != 0 or not (work / "libs" / f"kafka-streams-{version}.jar").is_file():
            raise JavaClientError(f"mvn could not resolve {POM}:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
        (work / "libs" / ".resolved").write_text(want + "\n")
        old = libs.with_name(libs.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if libs.exists():
            libs.rename(old)
        (work / "libs").rename(libs)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return libs


class StreamsApp:
    """One running application: its JSON output lines collected as they come; `stop()` sends
    SIGTERM (the application closes and commits) and waits."""

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

    def states(self) -> list[str]:
        return [line["state"] for line in self.lines if line["type"] == "state"]

    def closed(self) -> bool:
        """Whether the application closed cleanly (its shutdown hook ran KafkaStreams.close)."""
        return any(line["type"] == "closed" for line in self.lines)

    def errors(self) -> list[dict]:
        return [line for line in self.lines if line["type"] == "error"]

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, and the JVM's exit status (143 after its shutdown hook has run)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._reader.join(5)
        if self.proc.stdout:
            self.proc.stdout.close()
        return code


class StreamsApps:
    def __init__(self, classes: Path, libs: Path) -> None:
        self.classpath = f"{classes}{os.pathsep}{libs}{os.sep}*"

    def start(self, app: str, bootstrap: str, app_id: str, state_dir: Path, source: str, sink: str,
              guarantee: str = "at_least_once") -> StreamsApp:
        proc = subprocess.Popen(
            ["java", *JVM_OPTS, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", self.classpath,
             "StreamsApps", app, bootstrap, app_id, str(state_dir), source, sink, guarantee],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        return StreamsApp(proc)


def compile_streams_apps(classes: Path) -> StreamsApps:
    """javac StreamsApps.java into `classes` (the jars resolved first); JavaClientError when missing."""
    if shutil.which("javac") is None or shutil.which("java") is None:
        raise JavaClientError("no JDK (javac) on PATH: run scripts/fetch_java_clients")
    libs = ensure_jars()
    proc = subprocess.run(["javac", "-d", str(classes), "-cp", f"{libs}{os.sep}*", str(SOURCE)],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise JavaClientError(f"javac StreamsApps.java failed:\n{proc.stderr}")
    return StreamsApps(classes, libs)
