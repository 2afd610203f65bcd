import gc
import itertools
import os

import pytest

from minibroker.testing import running_broker

_counter = itertools.count()


@pytest.fixture
def unique():
    """unique('topic') -> a name no other test uses, so tests never share state."""
    def make(prefix: str) -> str:
        return f"{prefix}-{os.getpid()}-{next(_counter)}"
    return make


@pytest.fixture
def broker(tmp_path):
    with running_broker(tmp_path / "data") as running:
        yield running


@pytest.fixture
def admin(broker):
    """A minibroker.admin_client.AdminClient on the `broker` fixture (exact requests as dicts)."""
    from minibroker.admin_client import AdminClient

    with AdminClient(broker.bootstrap) as client:
        yield client


@pytest.fixture(scope="session")
def java(tmp_path_factory):
    """The Java client (tests/support/java_client.py), MiniClient compiled once per session."""
    from tests.support.java_client import JavaClientError, compile_mini_client

    try:
        client = compile_mini_client(tmp_path_factory.mktemp("java-classes"))
    except JavaClientError as exc:
        pytest.fail(str(exc))
    client.fail = pytest.fail
    yield client
    client.close()  # the JVM of `java.call`, if a test started it


@pytest.fixture(scope="session")
def kafka_reference(tmp_path_factory):
    """Apache Kafka 4.4 itself (tests/support/kafka_reference.py): one KRaft node in one JVM for the
    whole session, with a SASL_PLAINTEXT listener (users alice and bob) and Kafka's authorizer (super users
    ANONYMOUS and alice: reference.REFERENCE_SECURITY). Skips when scripts/install_kafka has
    not run, unless MINIBROKER_REQUIRE_KAFKA is set (scripts/test sets it after installing): then
    a missing reference fails."""
    from tests.support import kafka_reference as reference

    if not reference.installed():
        message = f"Kafka {reference.KAFKA_VERSION} is not installed: {reference.HOW_TO_GET}"
        if os.environ.get("MINIBROKER_REQUIRE_KAFKA"):
            pytest.fail(message)
        pytest.skip(message)
    try:
        kafka = reference.start_kafka(tmp_path_factory.mktemp("kafka-reference"),
                                      sasl_users=reference.SASL_USERS, overrides=reference.REFERENCE_SECURITY)
    except reference.KafkaReferenceError as exc:
        pytest.fail(str(exc))
    try:
        yield kafka
    finally:
        kafka.stop()


@pytest.fixture(scope="session")
def go_clients():
    """The Go clients' driver (tests/go: franz-go, sarama, kafka-go; tests/support/drivers.py), built
    once per session (a no-op when scripts/test built it from the same sources)."""
    from tests.support.drivers import DriverError, go_clients

    try:
        driver = go_clients()
    except DriverError as exc:
        pytest.fail(str(exc))
    driver.fail = pytest.fail
    return driver


@pytest.fixture(scope="session")
def kafkajs():
    """The kafkajs driver (tests/node/client.js; tests/support/drivers.py), its npm install checked
    once per session."""
    from tests.support.drivers import DriverError, kafkajs

    try:
        driver = kafkajs()
    except DriverError as exc:
        pytest.fail(str(exc))
    driver.fail = pytest.fail
    return driver


@pytest.fixture(scope="session")
def streams(tmp_path_factory):
    """Kafka Streams applications (tests/support/streams_app.py), StreamsApps compiled once per session."""
    from tests.support.java_client import JavaClientError
    from tests.support.streams_app import compile_streams_apps

    try:
        return compile_streams_apps(tmp_path_factory.mktemp("streams-classes"))
    except JavaClientError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def share_java(tmp_path_factory):
    """The Java share consumer (tests/support/share_client.py), ShareClient compiled once per session."""
    from tests.support.java_client import JavaClientError
    from tests.support.share_client import compile_share_client

    try:
        return compile_share_client(tmp_path_factory.mktemp("share-classes"))
    except JavaClientError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def spark():
    """One small local Spark (2 cores, 1 GB) for every pipeline test of the run."""
    from minibroker.pipeline.session import spark_session

    session = spark_session("local[2]", "minibroker-tests", shuffle_partitions=4, quiet=True,
                            conf={"spark.driver.memory": "1g"})
    yield session
    session.stop()


@pytest.fixture
def start_broker(tmp_path):
    """start_broker(data_dir=None, **overrides) -> context manager; for restarts on one data dir."""
    def start(data_dir=None, **overrides):
        return running_broker(data_dir or tmp_path / "data", **overrides)
    return start


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """scripts/test's `-n 2 --dist loadgroup`: each JVM family on one worker, the longest first
    (tests/support/scheduling.py)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from tests.support.scheduling import FamilyScheduling

    return FamilyScheduling(config, log)


def pytest_sessionfinish(session, exitstatus):
    # Client handles a failed test left behind (librdkafka's threads log their reconnect attempts)
    # are destroyed before pytest prints its closing line, so that line stays last.
    gc.collect()
