"""Run a broker inside a test suite: `with running_broker() as broker: ... broker.bootstrap ...`.

The broker runs on its own trio loop in a background thread, on 127.0.0.1 port 0, so synchronous
clients (kafka-python, confluent-kafka) and asyncio clients (aiokafka) can talk to it from the test;
`running_broker` yields a `RunningBroker` (its `bootstrap` address, the `Broker` itself, ...). A
pytest fixture `minibroker` (from the `minibroker.pytest_plugin` plugin) wraps it.
`broker_process` and `spawn_broker` run one in a subprocess instead (benchmarks that measure the
broker's own CPU, tests that kill it); it binds port 0 too and reports its address on its ready line.
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
from typing import Iterator, Mapping

import trio

from minibroker.broker import Broker
from minibroker.config import BROKER_CONFIGS, BrokerConfig
from minibroker.control.surface import ControlSurface
from minibroker.server import serve, sole_exception
from minibroker.tls_material import TlsMaterial


@dataclass
class RunningBroker(ControlSurface):
    """A broker started by `running_broker` (and the pytest fixtures): where clients reach it, where
    its data lives, and the `Broker` itself (its `faults`, `config`, `logs`, ...) for a test to use."""

    bootstrap: str
    host: str
    port: int
    data_dir: Path
    broker: Broker
    sasl_bootstrap: str | None = None  # the SASL_PLAINTEXT listener, when started with sasl_users
    metrics_url: str | None = None  # http://HOST:PORT/metrics, when started with metrics_listen
    trio_token: trio.lowlevel.TrioToken | None = None
    # With tls=True: the SSL listener, the mTLS one (an SSL listener named MTLS with
    # ssl.client.auth=required), SASL_SSL with sasl_users, and the certificates and client settings.
    ssl_bootstrap: str | None = None
    mtls_bootstrap: str | None = None
    sasl_ssl_bootstrap: str | None = None
    tls: TlsMaterial | None = None

    def listener(self, name: str) -> str:
        """bootstrap.servers of a listener by name (PLAINTEXT, SSL, MTLS, SASL_SSL, ...)."""
        host, port = self.broker.listeners[name]
        return f"{host}:{port}"

    @property
    def control_url(self) -> str | None:
        """http://HOST:PORT of the control endpoint, when started with control_listen="127.0.0.1:0"."""
        address = self.broker.control.address
        return f"http://{address[0]}:{address[1]}" if address else None

    def in_broker(self, fn, *args):
        """Run `fn(*args)` on the broker's trio thread and return its result (to read its state)."""
        return trio.from_thread.run_sync(fn, *args, trio_token=self.trio_token)


@contextlib.contextmanager
def running_broker(
    data_dir: Path | str | None = None, *, sasl_users: dict[str, str] | None = None, tls: bool | TlsMaterial = False,
    properties: Mapping[str, str] | None = None, **overrides: str
) -> Iterator[RunningBroker]:
    """Start a broker on 127.0.0.1:0 (overrides use Kafka's names with '_' for '.'; `properties`
    takes keys as they are, for those with '_' in them: listener.name.sasl_ssl....).

    `sasl_users={"alice": "pw"}` adds a SASL_PLAINTEXT listener (PLAIN, SCRAM-SHA-256/512) with
    those users, as `.sasl_bootstrap`; `metrics_listen="127.0.0.1:0"` serves `.metrics_url`.
    `tls=True` adds an SSL listener (`.ssl_bootstrap`), an mTLS one (`.mtls_bootstrap`: an SSL
    listener named MTLS that requires a client certificate) and, with sasl_users, SASL_SSL
    (`.sasl_ssl_bootstrap`), on throwaway certificates (minibroker.tls_material, in the data dir's
    parent temp dir); `.tls` has the CA, the client certificate and each client library's settings
    (`.tls.confluent(mtls=True)`, `.tls.kafka_python()`, `.tls.aiokafka()`, `.tls.java()`). A
    TlsMaterial instead of True reuses its certificates.
    A broker that cannot start raises what stopped it (a StartupError naming the address, path or
    file; a ConfigError naming the key), not the exception group trio wraps it in.
    """
    with contextlib.ExitStack() as stack:
        if data_dir is None:
            data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="minibroker-"))
        props = {"listeners": "127.0.0.1:0", "log.dirs": str(data_dir), "control.capture.requests": "1000"}
        listeners = ["PLAINTEXT://127.0.0.1:0"]
        if sasl_users is not None:
            listeners.append("SASL_PLAINTEXT://127.0.0.1:0")
            props["sasl.users"] = ",".join(f"{name}:{password}" for name, password in sasl_users.items())
        material: TlsMaterial | None = None
        if tls:
            material = tls if isinstance(tls, TlsMaterial) else TlsMaterial.create(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="minibroker-tls-")))
            listeners += ["SSL://127.0.0.1:0", "MTLS://127.0.0.1:0"]
            props["listener.security.protocol.map"] = (BROKER_CONFIGS["listener.security.protocol.map"].default
                                                       + ",MTLS:SSL")
            props |= material.broker_properties("SSL") | material.broker_properties("MTLS", client_auth="required")
            if sasl_users is not None:
                listeners.append("SASL_SSL://127.0.0.1:0")
                props |= material.broker_properties("SASL_SSL")
        if len(listeners) > 1:
            props["listeners"] = ",".join(listeners)
        props.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
        props.update(properties or {})
        config = BrokerConfig(props)
        started: queue.Queue = queue.Queue()
        scope = trio.CancelScope()  # cancelled from this thread when the block ends
        tokens: list[trio.lowlevel.TrioToken] = []

        async def main() -> None:
            with scope:
                tokens.append(trio.lowlevel.current_trio_token())
                async with trio.open_nursery() as nursery:
                    result = await nursery.start(serve, config)
                    if config["control.listen"] is not None:  # the HTTP control endpoint (minibroker.control)
                        from minibroker.control.host import BrokersTarget
                        from minibroker.control.http import serve_control

                        brokers = {result[2].node_id: result[2]}
                        result[2].control.address = await nursery.start(
                            serve_control, BrokersTarget(lambda: brokers), *config["control.listen"])
                    started.put(result)

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
        metrics = broker.metrics_address

        def bootstrap_of(name: str) -> str | None:
            found = broker.listeners.get(name)
            return f"{found[0]}:{found[1]}" if found else None

        try:
            yield RunningBroker(
                f"{host}:{port}", host, port, Path(data_dir), broker,
                sasl_bootstrap=bootstrap_of("SASL_PLAINTEXT"),
                metrics_url=f"http://{metrics[0]}:{metrics[1]}/metrics" if metrics else None,
                trio_token=tokens[0],
                ssl_bootstrap=bootstrap_of("SSL"), mtls_bootstrap=bootstrap_of("MTLS"),
                sasl_ssl_bootstrap=bootstrap_of("SASL_SSL"), tls=material,
            )
        finally:
            trio.from_thread.run_sync(scope.cancel, trio_token=tokens[0])
            thread.join(timeout=30)


@dataclass
class BrokerProcess:
    """A broker in a process of its own (`broker_process`), for benchmarks that measure its CPU."""

    proc: subprocess.Popen
    bootstrap: str
    data_dir: Path
    metrics_url: str | None = None

    def cpu_seconds(self) -> float:
        """User plus system CPU time the broker process has used so far (see `process_cpu`)."""
        user, system, _ = process_cpu(self.proc.pid)
        return user + system


def process_cpu(pid: int) -> tuple[float, float, int]:
    """(user seconds, system seconds, minor page faults) a process has used so far (Linux /proc).

    /proc/PID/stat counts CPU time in clock ticks (10 ms): over a 3M-record benchmark phase that is
    0.003 us per record, as large as the differences measured. The total here is the scheduler's
    nanosecond count summed over the process's threads (/proc/PID/task/*/schedstat), split into user
    and system in the proportion of the ticks. A thread that has exited is in the ticks only: when
    the nanosecond sum falls short of the ticks by more than two, the ticks are the total."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    hz = os.sysconf("SC_CLK_TCK")
    user_ticks, system_ticks, minor_faults = int(fields[11]), int(fields[12]), int(fields[7])
    ticks = (user_ticks + system_ticks) / hz
    exact = 0.0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            exact += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0]) / 1e9
        except (FileNotFoundError, ProcessLookupError):  # the thread exited meanwhile
            pass
    total = exact if exact >= ticks - 2 / hz else ticks
    user_share = user_ticks / (user_ticks + system_ticks) if user_ticks + system_ticks else 1.0
    return total * user_share, total * (1 - user_share), minor_faults


def spawn_broker(data_dir: Path | str, *extra_args: str, metrics: bool = False,
                 sasl_users: Mapping[str, str] | None = None, overrides: Mapping[str, str] | None = None,
                 ) -> tuple[subprocess.Popen, dict[str, str]]:
    """Start `minibroker serve` on 127.0.0.1 port 0 in a subprocess (the same Python) and wait for
    its ready line: the process, and the line's fields (`bootstrap.servers`, `SASL_PLAINTEXT` with
    `sasl_users`, `metrics` with `metrics=True`). The broker binds the ports and reports them, so no
    port is guessed. `overrides` use Kafka's names with '_' for '.', as `running_broker`'s; the
    caller stops the process (`stop_process`)."""
    args = [sys.executable, "-m", "minibroker.cli", "serve", "--listen", "127.0.0.1:0",
            "--data-dir", str(data_dir), "--log-level", "WARNING", *extra_args]
    if metrics:
        args += ["--metrics-listen", "127.0.0.1:0"]
    if sasl_users:
        args += ["--sasl-listen", "127.0.0.1:0"]
        args += [a for name, password in sasl_users.items() for a in ("--sasl-user", f"{name}:{password}")]
    for key, value in (overrides or {}).items():
        args += ["--override", f"{key.replace('_', '.')}={value}"]
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    ready = proc.stdout.readline()
    if "bootstrap.servers=" not in ready:
        proc.stdout.close()
        raise RuntimeError(f"broker did not start (exit code {proc.wait(30)})")
    return proc, dict(part.split("=", 1) for part in ready.split()[2:] if "=" in part)


def stop_process(proc: subprocess.Popen) -> None:
    """SIGTERM (a clean shutdown), SIGKILL after 30 s; then its pipes are closed."""
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


@contextlib.contextmanager
def broker_process(data_dir: Path | str | None = None, *, metrics: bool = False,
                   **overrides: str) -> Iterator[BrokerProcess]:
    """`minibroker serve` on 127.0.0.1 port 0 in a subprocess (`spawn_broker`), until the block ends."""
    with contextlib.ExitStack() as stack:
        if data_dir is None:
            data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="minibroker-"))
        proc, fields = spawn_broker(data_dir, metrics=metrics, overrides=overrides)
        try:
            yield BrokerProcess(proc, fields["bootstrap.servers"], Path(data_dir), fields.get("metrics"))
        finally:
            stop_process(proc)
