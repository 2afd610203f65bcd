"""Kafka Streams applications (tests/java/StreamsApps.java, Apache Kafka's kafka-streams) as a test helper.

The jars are Kafka's Java clients and Streams library at the version tests/java/pom.xml names, with
their runtime dependencies, which scripts/fetch_java_clients puts in the Java clients' cache
(tests/support/java_client.py's LIBS). StreamsApps is compiled once per test session (the `streams`
fixture); each start runs a JVM until stopped, with one KafkaStreams per rebalance protocol asked for
(classic, streams: group.protocol): application `<app_id>-<protocol>` writing `<sink>-<protocol>`,
so one JVM shows both protocols.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
from pathlib import Path

from tests.support.java_client import HOW_TO_GET, JARS, JVM_OPTS, LIBS, JavaClientError

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tests" / "java" / "StreamsApps.java"


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

    def states(self, protocol: str | None = None) -> list[str]:
        """The state changes of the application on `protocol` (every one's when None)."""
        return [line["state"] for line in self.lines
                if line["type"] == "state" and protocol in (None, line.get("app"))]

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
              guarantee: str = "at_least_once", protocols: tuple[str, ...] = ("classic",)) -> StreamsApp:
        """The application on each of `protocols`: as `<app_id>-<protocol>`, writing `<sink>-<protocol>`."""
        proc = subprocess.Popen(
            ["java", *JVM_OPTS, "-cp", self.classpath,
             "StreamsApps", app, bootstrap, app_id, str(state_dir), source, sink, guarantee, ",".join(protocols)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        return StreamsApp(proc)


def compile_streams_apps(classes: Path) -> StreamsApps:
    """javac StreamsApps.java into `classes`; JavaClientError naming what is missing."""
    if shutil.which("javac") is None or shutil.which("java") is None:
        raise JavaClientError(f"no JDK (javac) on PATH: {HOW_TO_GET}")
    missing = [jar for jar in JARS if not (LIBS / jar).is_file()]
    if missing:
        raise JavaClientError(f"missing {', '.join(missing)} in {LIBS}: {HOW_TO_GET}")
    libs = LIBS
    proc = subprocess.run(["javac", "-d", str(classes), "-cp", f"{libs}{os.sep}*", str(SOURCE)],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise JavaClientError(f"javac StreamsApps.java failed:\n{proc.stderr}")
    return StreamsApps(classes, libs)
