"""The real Java client (kafka-clients, through tests/java/MiniClient.java) as a test helper.

MiniClient is compiled once per pytest session (the `java` fixture in tests/conftest.py) and each
call runs its commands in one JVM (start-up dominates on 2 cores). The JDK and the jars come from
scripts/fetch_java_clients (which scripts/test runs), from Maven Central at the version
tests/java/pom.xml names: without them the Java tests fail, they do not skip. MINIBROKER_JAVA_CLIENTS
names the cache directory (one kafka-clients-<version>/ directory of jars per version), to share it
between checkouts. scripts/capture_frames uses the same helper.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Mapping

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tests" / "java" / "MiniClient.java"
POM = ROOT / "tests" / "java" / "pom.xml"


def _pom_property(name: str) -> str:
    properties = ElementTree.parse(POM).getroot().find("{http://maven.apache.org/POM/4.0.0}properties")
    assert properties is not None, f"{POM} has no <properties>"
    return properties.findtext("{http://maven.apache.org/POM/4.0.0}" + name, "")


KAFKA_CLIENTS_VERSION = _pom_property("kafka.version")
CACHE = Path(os.environ.get("MINIBROKER_JAVA_CLIENTS", ROOT / ".cache" / "java-clients"))
LIBS = CACHE / f"kafka-clients-{KAFKA_CLIENTS_VERSION}"
JARS = (f"kafka-clients-{KAFKA_CLIENTS_VERSION}.jar", f"kafka-streams-{KAFKA_CLIENTS_VERSION}.jar")
HOW_TO_GET = "run scripts/fetch_java_clients (scripts/test runs it) to install a JDK >= 17 and the jars"
# Short-lived JVMs: one GC thread and no C2 compile queue start faster on 2 cores. The clients log
# their warnings and errors (slf4j-simple) to stderr, which a failed run prints.
JVM_OPTS = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"]


class JavaClientError(Exception):
    pass


def _raise(message: str):
    raise JavaClientError(message)


class JavaClient:
    def __init__(self, classes: Path, fail=_raise):
        self.classpath = f"{classes}{os.pathsep}{LIBS}{os.sep}*"
        self.fail = fail  # called with the message when a run fails (pytest.fail in tests)
        self._server: subprocess.Popen | None = None  # MiniClient --serve (`call`)

    @staticmethod
    def _args(commands: tuple[list, ...]) -> list[str]:
        args: list[str] = []
        for command in commands:
            args += (["--"] if args else []) + [str(a) for a in command]
        return args

    def popen(self, *commands: list, stderr=subprocess.DEVNULL) -> subprocess.Popen:
        """Start MiniClient commands in one JVM without waiting: its stdout (text) gives the output
        lines as they come (for a test that acts on the client's progress)."""
        return subprocess.Popen(["java", *JVM_OPTS, "-cp", self.classpath, "MiniClient", *self._args(commands)],
                                stdout=subprocess.PIPE, stderr=stderr, text=True)

    def run(self, *commands: list, timeout: float = 120, client_config: Mapping[str, str] | None = None) -> list[dict]:
        """Run MiniClient commands in one JVM; returns its output lines as dicts. `client_config`:
        client properties every client of the run takes (security.protocol, ssl.*, sasl.*)."""
        args = self._args(commands)
        jvm = list(JVM_OPTS)
        config_file = None
        if client_config:
            import tempfile

            with tempfile.NamedTemporaryFile("w", suffix=".properties", delete=False) as f:
                # Properties files escape backslashes and the separators in values.
                f.write("".join(f"{k}={_escape(v)}\n" for k, v in client_config.items()))
                config_file = f.name
            jvm.append(f"-Dminibroker.client.config={config_file}")
        try:
            proc = subprocess.run(["java", *jvm, "-cp", self.classpath, "MiniClient", *args],
                                  capture_output=True, text=True, timeout=timeout)
        finally:
            if config_file is not None:
                os.unlink(config_file)
        lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0:
            stderr = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("SLF4J"))
            done = [line["command"] for line in lines if line["type"] == "done"]
            self.fail(
                f"MiniClient {' '.join(args)} exited {proc.returncode} after {done}:\n{stderr[-4000:]}")
        return lines


    # -- one JVM for the session -----------------------------------------------------------------

    def call(self, *commands: list, timeout: float = 120, client_config: Mapping[str, str] | None = None) -> list[dict]:
        """As `run`, in the session's one JVM (MiniClient --serve, started at the first call): no JVM
        start per run. A run that throws, or outlives `timeout` (the JVM is then stopped; the next
        call starts another), fails as `run` fails."""
        import queue
        import tempfile
        import threading

        args = self._args(commands)
        if any("\t" in a or "\n" in a for a in args):
            raise ValueError(f"a MiniClient argument with a tab or a newline: {args}")
        server = self._server
        if server is None or server.poll() is not None:
            self._stderr = tempfile.TemporaryFile("w+")
            server = self._server = subprocess.Popen(
                ["java", *JVM_OPTS, "-cp", self.classpath, "MiniClient", "--serve"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=self._stderr, text=True, bufsize=1)
            self._lines: queue.Queue[str | None] = queue.Queue()

            def pump(stdout=server.stdout, lines=self._lines) -> None:
                for line in stdout:
                    lines.put(line)
                lines.put(None)

            threading.Thread(target=pump, daemon=True).start()
        config_file = None
        if client_config:
            with tempfile.NamedTemporaryFile("w", suffix=".properties", delete=False) as f:
                f.write("".join(f"{k}={_escape(v)}\n" for k, v in client_config.items()))
                config_file = f.name
        lines: list[dict] = []
        try:
            assert server.stdin is not None
            server.stdin.write("\t".join([config_file or "", *args]) + "\n")
            server.stdin.flush()
            deadline = time.monotonic() + timeout
            while True:
                try:
                    text = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    self.close()
                    self.fail(f"MiniClient {' '.join(args)} did not finish in {timeout} s")
                    return lines
                if text is None:
                    self.fail(f"MiniClient --serve exited during {' '.join(args)}:\n{self._stderr_tail()}")
                    return lines
                if not text.startswith("{"):
                    continue
                line = json.loads(text)
                if line["type"] == "end":
                    break
                lines.append(line)
        finally:
            if config_file is not None:
                os.unlink(config_file)
        if line["error"] is not None:
            done = [item["command"] for item in lines if item["type"] == "done"]
            self.fail(f"MiniClient {' '.join(args)} failed after {done}: {line['error']}\n{self._stderr_tail()}")
        return lines

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        return "\n".join(line for line in self._stderr.read().splitlines()[-60:] if not line.startswith("SLF4J"))

    def close(self) -> None:
        """Stop the session's JVM, if one was started."""
        server, self._server = self._server, None
        if server is not None:
            if server.stdin is not None:
                server.stdin.close()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(10)
            if server.stdout is not None:
                server.stdout.close()
            self._stderr.close()


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def compile_mini_client(classes: Path) -> JavaClient:
    """javac MiniClient.java into `classes`; JavaClientError naming what is missing."""
    missing = [jar for jar in JARS if not (LIBS / jar).is_file()]
    if shutil.which("javac") is None or shutil.which("java") is None:
        raise JavaClientError(f"no JDK (javac) on PATH: {HOW_TO_GET}")
    if missing:
        raise JavaClientError(f"missing {', '.join(missing)} in {LIBS}: {HOW_TO_GET}")
    proc = subprocess.run(["javac", "-d", str(classes), "-cp", f"{LIBS}{os.sep}*", str(SOURCE)],
                          capture_output=True, text=True, timeout=180)
    if proc.returncode != 0:
        raise JavaClientError(f"javac failed (a JDK >= 17 is needed; {HOW_TO_GET}):\n{proc.stderr}")
    return JavaClient(classes)


def of_type(lines, kind):
    return [line for line in lines if line["type"] == kind]
