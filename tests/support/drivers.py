"""The clients of other languages as test helpers: the Go driver (tests/go/: franz-go, sarama,
kafka-go) and the Node one (tests/node/client.js: kafkajs), with what their tests share.

Each driver is a small program in the client's own language that runs commands given on its command
line ("--" between commands, all in one process) and prints one JSON object per line, as
tests/java/MiniClient.java does for Java. The programs are installed by the project's scripts
(scripts/fetch_go_clients builds the Go one from the Go module proxy; scripts/fetch_node_clients
runs `npm ci` for kafkajs), which scripts/test runs and the session fixtures of tests/conftest.py run
again (a no-op when up to date): without them the tests fail, they do not skip.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import defaultdict
from pathlib import Path

from minibroker.protocol.messages import peek_api
from tests.support.clients import Message

ROOT = Path(__file__).resolve().parents[2]
GO_CACHE = Path(os.environ.get("MINIBROKER_GO_CLIENTS", ROOT / ".cache" / "go"))
GO_BINARY = GO_CACHE / "bin" / "goclients"
NODE_DIR = ROOT / "tests" / "node"


class DriverError(Exception):
    pass


def _raise(message: str):
    raise DriverError(message)


class Driver:
    """Runs a client driver's commands in one process; returns its output lines as dicts."""

    def __init__(self, name: str, argv: list[str], cwd: Path | None = None, fail=_raise):
        self.name, self.argv, self.cwd = name, argv, cwd
        self.fail = fail  # called with the message when a run fails (pytest.fail in tests)

    def run(self, *commands: list, timeout: float = 150) -> list[dict]:
        args: list[str] = []
        for command in commands:
            args += (["--"] if args else []) + [str(a) for a in command]
        proc = subprocess.run([*self.argv, *args], capture_output=True, text=True, timeout=timeout, cwd=self.cwd)
        lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0:
            done = [line["command"] for line in lines if line["type"] == "done"]
            errors = [line["error"] for line in lines if line["type"] == "error"]
            self.fail(f"{self.name} {' '.join(args)} exited {proc.returncode} after {done}: {errors}\n"
                      f"{proc.stderr[-4000:]}")
        return lines


def _install(script: str) -> None:
    proc = subprocess.run(["bash", str(ROOT / "scripts" / script)], capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0:
        raise DriverError(f"scripts/{script} failed (scripts/test runs it):\n{proc.stderr[-4000:]}")


def go_clients() -> Driver:
    """The Go driver, built (or found up to date) by scripts/fetch_go_clients."""
    _install("fetch_go_clients")
    return Driver("goclients", [str(GO_BINARY)])


def kafkajs() -> Driver:
    """The kafkajs driver, its node_modules installed (or found up to date) by scripts/fetch_node_clients."""
    _install("fetch_node_clients")
    return Driver("kafkajs", ["node", str(NODE_DIR / "client.js")], cwd=NODE_DIR)


def of_type(lines, kind):
    return [line for line in lines if line["type"] == kind]


def driver_messages(count: int, partitions: int, first: int = 0) -> list[Message]:
    """The records the drivers' `produce` sends (MiniClient's formula), record i to partition i % n."""
    return [
        Message(
            partition=i % partitions,
            key=b"key-%d" % i,
            value=bytes((i * 131 + j * 29 + (j >> 3)) & 0xFF for j in range(i * 7919 % 301)),
            headers=(("trace", b"%d" % i), ("origin", (i * 2654435761 & 0xFFFFFFFF).to_bytes(4, "big"))),
        )
        for i in range(first, first + count)
    ]


def records(lines, topic=None):
    """A driver's record lines as the Record tuples of tests.support.clients."""
    return [
        (r["partition"], r["offset"],
         None if r["key"] is None else bytes.fromhex(r["key"]),
         None if r["value"] is None else bytes.fromhex(r["value"]),
         tuple((k, bytes.fromhex(v)) for k, v in r["headers"]))
        for r in lines
        if r["type"] == "record" and (topic is None or r["topic"] == topic)
    ]


class ApiLog:
    """Which (API, version) pairs a client sent, by its client id's prefix: the broker's
    handle_frame, wrapped. str() gives them as "fetch v11, produce v7, ..."."""

    def __init__(self, client_id_prefix: bytes):
        self.prefix = client_id_prefix
        self.seen: dict[str, set[int]] = defaultdict(set)

    def watch(self, running):
        broker = running.broker
        original = broker.handle_frame

        async def handle_frame(frame, conn):
            api_key, version, _ = peek_api(frame)
            # Every request header has the client id as an INT16-length string at byte 8.
            length = int.from_bytes(frame[8:10], "big", signed=True)
            if length > 0 and bytes(frame[10:10 + length]).startswith(self.prefix):
                handler = broker.handlers.get(api_key)
                self.seen[handler.name if handler else f"api{api_key}"].add(version)
            return await original(frame, conn)

        broker.handle_frame = handle_frame
        return running

    def __str__(self):
        return ", ".join(f"{name} v{'/'.join(map(str, sorted(v)))}" for name, v in sorted(self.seen.items()))


def active_producers(admin, topic: str, partitions: int) -> dict[int, list]:
    """partition -> its active producers (DescribeProducers), through minibroker's AdminClient."""
    response = admin.call(61, {"topics": [{"name": topic, "partition_indexes": list(range(partitions))}]})
    found = {}
    for t in response.topics:
        for p in t.partitions:
            assert p.error_code == 0, p
            found[p.partition_index] = list(p.active_producers)
    return found


def committed_offsets(admin, group: str, topic: str, partitions: int) -> dict[int, int]:
    """partition -> the group's committed offset (OffsetFetch v7), -1 when none."""
    response = admin.call(9, {"group_id": group, "topics": [{"name": topic, "partition_indexes":
                                                               list(range(partitions))}],
                              "require_stable": True}, version=7)
    assert response.error_code == 0, response
    return {p.partition_index: p.committed_offset for t in response.topics for p in t.partitions}
