"""pytest plugin: brokers for a test suite, each on 127.0.0.1 port 0 with its data in the test's tmp_path.

Enabled automatically when minibroker is installed (entry point `pytest11`). It gives:

- `minibroker`: one broker for the test (a `minibroker.testing.RunningBroker`; its `bootstrap` is the
  bootstrap.servers), configured by the `minibroker` marker;
- `minibroker_cluster`: several brokers in one process (a `minibroker.testing.RunningCluster`, three
  by default), with replication and the controls a test moves leaders and stops brokers with;
- `minibroker_factory`: a callable that starts another broker on each call, for tests that need
  several, or one stopped and started again on the same data;
- the `minibroker` marker: `@pytest.mark.minibroker(num_partitions=3, sasl_users={"alice": "pw"})`
  on a test, a class or a module (`pytestmark = ...`); Kafka's setting names with `_` for `.`, or a
  dict of dotted names as the first argument. Settings given closer to the test win.

The broker is imported inside the fixtures, so that merely having the plugin installed costs a test
run nothing.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping

import pytest

if TYPE_CHECKING:
    from minibroker.testing import RunningBroker, RunningCluster

MARKER = "minibroker"
# running_broker's own arguments; every other setting is a broker config key.
_NOT_CONFIG_KEYS = frozenset({"data_dir", "sasl_users", "tls", "properties", "brokers"})


def _kafka_names(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Settings with Kafka's dotted names (num_partitions -> num.partitions), so that a dotted and an
    underscored spelling of one key override each other instead of both reaching the broker."""
    return {key if key in _NOT_CONFIG_KEYS else str(key).replace("_", "."): value for key, value in settings.items()}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(settings=None, /, **settings): settings of the brokers the minibroker fixtures start: "
        "Kafka's names with '_' for '.' (num_partitions=3, log_retention_ms=1000), a dict of dotted "
        "names as the first argument, sasl_users={name: password} for a SASL_PLAINTEXT listener, tls=True for "
        "SSL and mTLS listeners on throwaway certificates (and SASL_SSL with sasl_users), "
        "metrics_listen='127.0.0.1:0' for /metrics. Closer markers win (test over class over module).",
    )


def marker_settings(node: pytest.Item) -> dict[str, Any]:
    """The `minibroker` marker settings that apply to a test: those of the module, then the class,
    then the test itself, each overriding the one before. Shared by the plugin's fixtures (a cluster
    fixture takes its brokers' settings from the same marker)."""
    settings: dict[str, Any] = {}
    for mark in reversed(list(node.iter_markers(MARKER))):  # iter_markers gives the closest first
        if len(mark.args) > 1 or (mark.args and not isinstance(mark.args[0], dict)):
            raise pytest.UsageError(
                f"@pytest.mark.{MARKER} takes keyword settings and at most one dict of settings, got {mark.args!r}")
        settings.update(_kafka_names(mark.args[0] if mark.args else {}))
        settings.update(_kafka_names(mark.kwargs))
    return settings


class BrokerFactory:
    """Starts brokers for one test and stops them when it ends (see the `minibroker_factory` fixture)."""

    def __init__(self, tmp_path: Path, defaults: dict[str, Any]) -> None:
        self._tmp_path = tmp_path
        self._defaults = defaults
        self._running: dict[int, contextlib.AbstractContextManager[RunningBroker]] = {}
        self._started = 0

    def __call__(self, data_dir: Path | str | None = None, **settings: Any) -> RunningBroker:
        """Start a broker and return it; `settings` over the marker's; `data_dir` defaults to a new
        directory under the test's tmp_path (pass a stopped broker's `data_dir` to start it again)."""
        from minibroker.testing import running_broker

        self._started += 1
        merged = {**self._defaults, **_kafka_names(settings)}
        marker_dir = merged.pop("data_dir", None)
        merged.pop("brokers", None)  # the cluster fixture's
        if data_dir is None:
            data_dir = marker_dir or self._tmp_path / f"minibroker-{self._started}"
        manager = running_broker(data_dir, **merged)
        running = manager.__enter__()
        self._running[id(running)] = manager
        return running

    def stop(self, running: RunningBroker) -> None:
        """Stop one broker cleanly now (its data stays in its `data_dir`)."""
        manager = self._running.pop(id(running), None)
        if manager is None:
            raise ValueError("this broker was not started by this factory, or is already stopped")
        manager.__exit__(None, None, None)

    def close(self) -> None:
        """Stop every broker still running, the latest started first."""
        errors = []
        for key in reversed(list(self._running)):
            try:
                self._running.pop(key).__exit__(None, None, None)
            except Exception as exc:  # stop the others all the same
                errors.append(exc)
        if errors:
            raise errors[0]


@pytest.fixture
def minibroker_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BrokerFactory]:
    """A callable that starts a broker per call: `minibroker_factory(**settings) -> RunningBroker`.

    Each broker listens on 127.0.0.1 port 0 with its own data dir under tmp_path; all are stopped
    when the test ends. Settings are those of the `minibroker` marker, overridden by the call's
    (Kafka's names with '_' for '.', `sasl_users={...}`, `data_dir=...` to start again on a stopped
    broker's data). `minibroker_factory.stop(broker)` stops one now.

        def test_two_brokers(minibroker_factory):
            source = minibroker_factory(num_partitions=3)
            sink = minibroker_factory(auto_create_topics_enable=False)
    """
    factory = BrokerFactory(tmp_path, marker_settings(request.node))
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture
def minibroker(minibroker_factory: BrokerFactory) -> RunningBroker:
    """A broker for this test: a `minibroker.testing.RunningBroker` on 127.0.0.1 port 0.

    `minibroker.bootstrap` is the bootstrap.servers; `.sasl_bootstrap` the SASL_PLAINTEXT listener
    (with sasl_users), `.metrics_url` the /metrics address (with metrics_listen), `.data_dir` its
    data, `.broker` the broker itself (`.broker.faults.add(FaultRule(...))` from minibroker.faults).
    Settings come from the `minibroker` marker:

        @pytest.mark.minibroker(num_partitions=3, sasl_users={"alice": "alice-secret"})
        def test_orders(minibroker): ...
    """
    return minibroker_factory()


@pytest.fixture
def minibroker_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningCluster]:
    """Three brokers in one process for this test: a `minibroker.testing.RunningCluster`.

    `minibroker_cluster.bootstrap` is the bootstrap.servers (every broker); the controls are one
    line each: `stop(node, kill=False)`, `start(node)`, `move_leader(topic, partition, node)`,
    `shuffle_leaders()`, `move_coordinator(group=... | transactional_id=... | share_group=..., broker=node)`,
    `brokers()`, `leader(topic, partition)`, `isr(topic, partition)`. Settings come from the
    `minibroker` marker, as for `minibroker`, and apply to every broker; `brokers=N` there sets
    how many (3 by default):

        @pytest.mark.minibroker(brokers=3, default_replication_factor=3, min_insync_replicas=2)
        def test_failover(minibroker_cluster): ...
    """
    from minibroker.testing import running_cluster

    settings = marker_settings(request.node)
    brokers = int(settings.pop("brokers", 3))
    data_dir = settings.pop("data_dir", None) or tmp_path / "minibroker-cluster"
    with running_cluster(brokers, data_dir, **settings) as cluster:
        yield cluster
