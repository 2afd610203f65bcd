"""Run a broker inside a test suite: `with running_broker() as bootstrap: ...`.

The broker runs on its own trio loop in a background thread, on 127.0.0.1 port 0, so synchronous
clients (kafka-python, confluent-kafka) and asyncio clients (aiokafka) can talk to it from the test.
A pytest fixture `minibroker` (from the `minibroker.pytest_plugin` plugin) wraps it.
`broker_process` runs one in a subprocess instead, for benchmarks that measure the broker's own CPU.
"""

from __future__ import annotations

import contextlib
import os
import queue
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import trio

from minibroker.broker import Broker
from minibroker.config import BrokerConfig
from minibroker.server import serve, sole_exception


@dataclass
class RunningBroker:
    bootstrap: str
    host: str
    port: int
    data_dir: Path
    broker: Broker
    sasl_bootstrap: str | None = None  # the SASL_PLAINTEXT listener, when started with sasl_users
    metrics_url: str | None = None  # http://HOST:PORT/metrics, when started with metrics_listen
    trio_token: object = None

    def in_broker(self, fn, *args):
        """Run `fn(*args)` on the broker's trio thread and return its result (to read its state)."""
        return trio.from_thread.run_sync(fn, *args, trio_token=self.trio_token)


@contextlib.contextmanager
def running_broker(
    data_dir: Path | str | None = None, *, sasl_users: dict[str, str] | None = None, **overrides: str
) -> Iterator[RunningBroker]:
    """Start a broker on 127.0.0.1:0 (overrides use Kafka's names with '_' for '.').

    `sasl_users={"alice": "pw"}` adds a SASL_PLAINTEXT listener (PLAIN, SCRAM-SHA-256/512) with
    those users, as `.sasl_bootstrap`; `metrics_listen="127.0.0.1:0"` serves `.metrics_url`.
    A broker that cannot start raises what stopped it (a StartupError naming the address, path or
    file; a ConfigError naming the key), not the exception group trio wraps it in.
    """
    with contextlib.ExitStack() as stack:
        if data_dir is None:
            data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="minibroker-"))
        props = {"listeners": "127.0.0.1:0", "log.dirs": str(data_dir)}
        if sasl_users is not None:
            props["listeners"] = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"
            props["sasl.users"] = ",".join(f"{name}:{password}" for name, password in sasl_users.items())
        props.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
        config = BrokerConfig(props)
        started: queue.Queue = queue.Queue()
        stop: dict[str, object] = {}

        async def main() -> None:
            with trio.CancelScope() as scope:
                stop["scope"] = scope
                stop["token"] = trio.lowlevel.current_trio_token()
                async with trio.open_nursery() as nursery:
                    started.put(await nursery.start(serve, config))

        def run() -> None:
            try:
                trio.run(main)
            except BaseException as exc:  # report start-up failures to the caller, unwrapped
                started.put(sole_exception(exc))

        thread = threading.Thread(target=run, name="minibroker", daemon=True)
        thread.start()
        result = started.get(timeout=30)
        if isinstance(result, BaseException):
            raise result
        host, port, broker = result
        sasl = broker.listeners.get("SASL_PLAINTEXT")
        metrics = broker.metrics_address
        try:
            yield RunningBroker(
                f"{host}:{port}", host, port, Path(data_dir), broker,
                sasl_bootstrap=f"{sasl[0]}:{sasl[1]}" if sasl else None,
                metrics_url=f"http://{metrics[0]}:{metrics[1]}/metrics" if metrics else None,
                trio_token=stop["token"],
            )
        finally:
            trio.from_thread.run_sync(stop["scope"].cancel, trio_token=stop["token"])
            thread.join(timeout=30)


@dataclass
class BrokerProcess:
    """A broker in a process of its own (`broker_process`), for benchmarks that measure its CPU."""

    proc: subprocess.Popen
    bootstrap: str
    data_dir: Path
    metrics_url: str | None = None

    def cpu_seconds(self) -> float:
        """User plus system CPU time the broker process has used so far (Linux /proc)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def broker_process(data_dir: Path | str | None = None, *, metrics: bool = False,
                   **overrides: str) -> Iterator[BrokerProcess]:
    """`minibroker serve` on 127.0.0.1 port 0 in a subprocess (the same Python), until the block ends.

    Overrides use Kafka's names with '_' for '.', as `running_broker`'s. The broker reports its
    address on its ready line, so no port is guessed."""
    with contextlib.ExitStack() as stack:
        if data_dir is None:
            data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="minibroker-"))
        args = [sys.executable, "-m", "minibroker.cli", "serve", "--listen", "127.0.0.1:0",
                "--data-dir", str(data_dir), "--log-level", "WARNING"]
        if metrics:
            args += ["--metrics-listen", "127.0.0.1:0"]
        for key, value in overrides.items():
            args += ["--override", f"{key.replace('_', '.')}={value}"]
        root = Path(__file__).resolve().parent.parent
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=env)
        try:
            ready = proc.stdout.readline()
            if "bootstrap.servers=" not in ready:
                raise RuntimeError(f"broker did not start (exit code {proc.wait(30)})")
            fields = dict(part.split("=", 1) for part in ready.split()[2:] if "=" in part)
            yield BrokerProcess(proc, fields["bootstrap.servers"], Path(data_dir), fields.get("metrics"))
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
