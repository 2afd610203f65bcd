"""Run brokers inside a test suite: `with running_broker() as broker: ... broker.bootstrap ...`, or
several: `with running_cluster(brokers=3) as cluster: ... cluster.bootstrap ...`.

The brokers run on their own trio loop in a background thread, on 127.0.0.1 port 0, so synchronous
clients (kafka-python, confluent-kafka) and asyncio clients (aiokafka) can talk to them from the
test. `running_cluster` yields a `RunningCluster`: where clients reach it (`bootstrap`), its brokers
(`broker(node_id)`), and the controls a test uses on it, each one line (`stop`, `start`,
`move_leader`, `shuffle_leaders`, `advance`, ...; docs/cluster.md lists them). `running_broker` is a
cluster of one (`RunningBroker`, with the same controls and the `Broker` itself as `.broker`). The
pytest fixtures `minibroker` and `minibroker_cluster` (the `minibroker.pytest_plugin` plugin) wrap
them. `broker_process` and `spawn_broker` run one in a subprocess instead (benchmarks that measure
the broker's own CPU, tests that kill it); it binds port 0 too and reports its address on its
ready line.
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

import trio

from minibroker.broker import Broker
from minibroker.cluster_runtime import ClusterRuntime, cluster_configs
from minibroker.config import BROKER_CONFIGS, BrokerConfig
from minibroker.control.surface import ControlSurface
from minibroker.server import sole_exception
from minibroker.tls_material import TlsMaterial


class RunningCluster(ControlSurface):
    """A cluster started by `running_cluster`: where clients reach it, its brokers, and the controls
    (module docstring). Every control runs on the cluster's trio thread and returns once done."""

    def __init__(self, runtime: ClusterRuntime, data_dir: Path, trio_token: trio.lowlevel.TrioToken,
                 tls: TlsMaterial | None = None) -> None:
        self.runtime = runtime
        self.data_dir = data_dir
        self.trio_token = trio_token
        # With tls=True: the certificates and each client library's settings (minibroker.tls_material).
        self.tls = tls

    # -- where it is -------------------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """bootstrap.servers: every broker's PLAINTEXT address (stopped ones included: clients skip them)."""
        return ",".join(f"{h}:{p}" for h, p in self._addresses("PLAINTEXT"))

    def listener(self, name: str) -> str:
        """bootstrap.servers of a listener by name (PLAINTEXT, SSL, MTLS, SASL_SSL, ...), every broker's."""
        addresses = self._addresses(name)
        if not addresses:
            raise KeyError(f"no {name} listener")
        return ",".join(f"{h}:{p}" for h, p in addresses)

    def _listener_or_none(self, name: str) -> str | None:
        return self.listener(name) if self._addresses(name) else None

    @property
    def sasl_bootstrap(self) -> str | None:
        """The SASL_PLAINTEXT listeners' addresses, when started with sasl_users."""
        return self._listener_or_none("SASL_PLAINTEXT")

    @property
    def ssl_bootstrap(self) -> str | None:
        """The SSL listeners' addresses, when started with tls=True."""
        return self._listener_or_none("SSL")

    @property
    def mtls_bootstrap(self) -> str | None:
        """The mTLS listeners' (an SSL listener named MTLS, ssl.client.auth=required), with tls=True."""
        return self._listener_or_none("MTLS")

    @property
    def sasl_ssl_bootstrap(self) -> str | None:
        """The SASL_SSL listeners', with tls=True and sasl_users."""
        return self._listener_or_none("SASL_SSL")

    def _addresses(self, listener: str) -> list[tuple[str, int]]:
        found = []
        for node_id in sorted(self.runtime.slots):
            endpoints = self.runtime.endpoints.get(node_id)
            if endpoints is not None and listener in endpoints.listeners:
                found.append(endpoints.listeners[listener])
        return found

    @property
    def node_ids(self) -> list[int]:
        return sorted(self.runtime.slots)

    def broker(self, node_id: int) -> Broker | None:
        """The running Broker of a node id (None while it is stopped)."""
        return self.runtime.broker(node_id)

    def broker_bootstrap(self, node_id: int, listener: str = "PLAINTEXT") -> str:
        host, port = self.runtime.endpoints[node_id].listeners[listener]
        return f"{host}:{port}"

    @property
    def controller(self):
        """The controller (minibroker.storage.controller): its `image` is the cluster's metadata."""
        return self.runtime.controller

    def leader(self, topic: str, partition: int) -> int:
        """The node id leading a partition now (-1: none)."""
        return self.in_cluster(lambda: self._registration(topic, partition).leader)

    def replicas(self, topic: str, partition: int) -> tuple[int, ...]:
        return self.in_cluster(lambda: self._registration(topic, partition).replicas)

    def isr(self, topic: str, partition: int) -> tuple[int, ...]:
        return self.in_cluster(lambda: self._registration(topic, partition).isr)

    def _registration(self, topic: str, partition: int):
        registration = self.runtime.controller.image.partition(topic, partition) if self.runtime.controller else None
        if registration is None:
            raise KeyError(f"no partition {topic}-{partition}")
        return registration

    @property
    def control_url(self) -> str | None:
        """http://HOST:PORT of the control endpoint (minibroker.control), when started with
        control_listen="127.0.0.1:0"."""
        address = self.runtime.control_address
        return f"http://{address[0]}:{address[1]}" if address else None

    # -- running code on the cluster's thread ------------------------------------------------------------

    def in_cluster(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run `fn(*args)` on the cluster's trio thread and return its result (to read its state)."""
        return trio.from_thread.run_sync(fn, *args, trio_token=self.trio_token)

    def in_broker(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self.in_cluster(fn, *args)

    def _run(self, afn: Callable[..., Any], *args: Any) -> Any:
        return trio.from_thread.run(afn, *args, trio_token=self.trio_token)

    # -- controls ------------------------------------------------------------------------------------------

    def stop(self, node_id: int, kill: bool = False) -> None:
        """Stop a broker: a controlled shutdown (its leaderships move first), or, with kill=True, as
        a kill -9 (nothing moves until its session times out: broker.session.timeout.ms)."""
        self._run(self.runtime.stop, node_id, kill)

    def start(self, node_id: int) -> None:
        """Start a stopped broker again, on its data and ports; it catches up from the leaders."""
        self._run(self.runtime.start, node_id)

    def move_leader(self, topic: str, partition: int, broker: int) -> None:
        """Make `broker` (a replica in the ISR, up) the partition's leader, in a new leader epoch."""
        self._run(self.runtime.move_leader, topic, partition, broker)

    def shuffle_leaders(self, topics: Iterable[str] | None = None) -> int:
        """A new leader, at random among the other ISR members up, for every partition that has
        one; how many moved."""
        return self._run(self.runtime.shuffle_leaders, topics)

    def move_coordinator(self, *, group: str | None = None, transactional_id: str | None = None,
                         share_group: str | None = None, broker: int) -> None:
        """Move a group's, a transactional id's or a share group's (its share coordinator's)
        coordinator to `broker` (the leader of its partition of __consumer_offsets /
        __transaction_state / __share_group_state moves there)."""
        self._run(functools.partial(self.runtime.move_coordinator, group=group,
                                    transactional_id=transactional_id, share_group=share_group, broker=broker))

    def brokers(self) -> list[dict[str, Any]]:
        """Every broker: node_id, host, port, rack, state (running, stopped, killed), controller."""
        return self.in_cluster(self.runtime.brokers)

    def advance(self, seconds: float = 0, *, minutes: float = 0, hours: float = 0, days: float = 0) -> None:
        """Move every broker's clock (and the controller's) forward together."""
        total = seconds + 60 * minutes + 3600 * hours + 86400 * days
        self.in_cluster(self.runtime.advance, total)


class RunningBroker(RunningCluster):
    """A broker started by `running_broker` (and the `minibroker` fixture): a cluster of one, with
    its address (`bootstrap`, `host`, `port`), its data, and the `Broker` itself (its `faults`,
    `config`, `logs`, ...) for a test to use."""

    @property
    def node_id(self) -> int:
        return self.node_ids[0]

    @property
    def broker(self) -> Broker:  # type: ignore[override]
        broker = self.runtime.slots[self.node_id].broker
        assert broker is not None
        return broker

    @property
    def host(self) -> str:
        return self.runtime.endpoints[self.node_id].default[0]

    @property
    def port(self) -> int:
        return self.runtime.endpoints[self.node_id].default[1]

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def metrics_url(self) -> str | None:
        """http://HOST:PORT/metrics, when started with metrics_listen."""
        address = self.broker.metrics_address
        return f"http://{address[0]}:{address[1]}/metrics" if address else None


def _base_props(data_dir: Path | str, sasl_users: dict[str, str] | None, tls: TlsMaterial | None,
                properties: Mapping[str, str] | None, overrides: Mapping[str, Any]) -> dict[str, str]:
    props = {"listeners": "127.0.0.1:0", "log.dirs": str(data_dir), "control.capture.requests": "1000"}
    listeners = ["PLAINTEXT://127.0.0.1:0"]
    if sasl_users is not None:
        listeners.append("SASL_PLAINTEXT://127.0.0.1:0")
        props["sasl.users"] = ",".join(f"{name}:{password}" for name, password in sasl_users.items())
    if tls is not None:
        listeners += ["SSL://127.0.0.1:0", "MTLS://127.0.0.1:0"]
        props["listener.security.protocol.map"] = (BROKER_CONFIGS["listener.security.protocol.map"].default
                                                   + ",MTLS:SSL")
        props |= tls.broker_properties("SSL") | tls.broker_properties("MTLS", client_auth="required")
        if sasl_users is not None:
            listeners.append("SASL_SSL://127.0.0.1:0")
            props |= tls.broker_properties("SASL_SSL")
    if len(listeners) > 1:
        props["listeners"] = ",".join(listeners)
    props.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
    props.update(properties or {})
    return props


@contextlib.contextmanager
def _running(data_dir: Path | str | None, brokers: int, sasl_users: dict[str, str] | None,
             tls: bool | TlsMaterial, properties: Mapping[str, str] | None, overrides: Mapping[str, Any],
             kind: type[RunningCluster]) -> Iterator[Any]:
    with contextlib.ExitStack() as stack:
        if data_dir is None:
            data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="minibroker-"))
        material: TlsMaterial | None = None
        if tls:
            material = tls if isinstance(tls, TlsMaterial) else TlsMaterial.create(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="minibroker-tls-")))
        props = _base_props(data_dir, sasl_users, material, properties, overrides)
        configs = cluster_configs(BrokerConfig(props), brokers)
        runtime = ClusterRuntime(configs)
        started: queue.Queue = queue.Queue()
        scope = trio.CancelScope()  # cancelled from this thread when the block ends
        tokens: list[trio.lowlevel.TrioToken] = []

        async def main() -> None:
            with scope:
                tokens.append(trio.lowlevel.current_trio_token())
                async with trio.open_nursery() as nursery:
                    result = await nursery.start(runtime.run)
                    if configs[0]["control.listen"] is not None:  # the HTTP control endpoint (minibroker.control)
                        from minibroker.control.host import RuntimeTarget
                        from minibroker.control.http import serve_control

                        runtime.control_address = await nursery.start(
                            serve_control, RuntimeTarget(runtime), *configs[0]["control.listen"])
                    started.put(result)

        def run() -> None:
            try:
                trio.run(main)
            except BaseException as exc:  # report start-up failures to the caller, unwrapped
                started.put(sole_exception(exc))

        thread = threading.Thread(target=run, name="minibroker", daemon=True)
        thread.start()
        result = started.get(timeout=60)
        if isinstance(result, BaseException):
            raise result
        try:
            yield kind(runtime, Path(data_dir), tokens[0], material)
        finally:
            trio.from_thread.run_sync(scope.cancel, trio_token=tokens[0])
            thread.join(timeout=60)


@contextlib.contextmanager
def running_cluster(brokers: int = 3, data_dir: Path | str | None = None, *,
                    sasl_users: dict[str, str] | None = None, tls: bool | TlsMaterial = False,
                    properties: Mapping[str, str] | None = None, **overrides: Any) -> Iterator[RunningCluster]:
    """Start `brokers` brokers in one process on 127.0.0.1:0 (overrides use Kafka's names with '_'
    for '.', and apply to every broker: default_replication_factor=3, min_insync_replicas=2, ...).
    Node ids count up from node_id (1 by default); each broker keeps its data in
    `<data_dir>/broker-<id>` (a cluster of one in `data_dir` itself). `sasl_users`, `tls` and
    `properties` as for `running_broker`, on every broker (one set of certificates for all)."""
    with _running(data_dir, brokers, sasl_users, tls, properties, overrides, RunningCluster) as cluster:
        yield cluster


@contextlib.contextmanager
def running_broker(
    data_dir: Path | str | None = None, *, sasl_users: dict[str, str] | None = None, tls: bool | TlsMaterial = False,
    properties: Mapping[str, str] | None = None, **overrides: str
) -> Iterator[RunningBroker]:
    """Start a broker on 127.0.0.1:0, a cluster of one (overrides use Kafka's names with '_' for
    '.'; `properties` takes keys as they are, for those with '_' in them: listener.name.sasl_ssl....).

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
    with _running(data_dir, 1, sasl_users, tls, properties, overrides, RunningBroker) as broker:
        yield broker


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
