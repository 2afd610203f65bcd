"""Client quota administration: DescribeClientQuotas and AlterClientQuotas over the wire (both
versions), persistence in the data dir across a restart, and `minibroker configs` end to end."""

from __future__ import annotations

import subprocess
import sys

import pytest

from minibroker.protocol.entities import build
from tests.support.metadata import metadata_of
from tests.support.wire import WireClient, schema

MINIBROKER = [sys.executable, "-m", "minibroker.cli"]


def alter(client, entries, version=1, validate_only=False):
    """entries: [(entity [(type, name|None)], ops [(key, value, remove)])]"""
    return client.request(build(schema(49, version), {
        "entries": [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                     "ops": [{"key": k, "value": v, "remove": r} for k, v, r in ops]}
                    for entity, ops in entries],
        "validate_only": validate_only,
    }))


def describe(client, components, strict=False, version=1):
    """components: [(type, match_type, match)] -> (error, message, {frozenset(entity): {key: value}})"""
    response = client.request(build(schema(48, version), {
        "components": [{"entity_type": t, "match_type": m, "match": n} for t, m, n in components],
        "strict": strict,
    }))
    found = None
    if response.entries is not None:
        found = {frozenset((e.entity_type, e.entity_name) for e in entry.entity):
                 {v.key: v.value for v in entry.values} for entry in response.entries}
    return response.error_code, response.error_message, found


@pytest.mark.parametrize("version", [0, 1])
def test_alter_then_describe_over_the_wire(broker, unique, version):
    alice, app = unique("alice"), unique("app")
    with WireClient(broker.bootstrap) as c:
        result = alter(c, [
            ([("user", alice)], [("producer_byte_rate", 1048576, False), ("consumer_byte_rate", 2000, False)]),
            ([("user", alice), ("client-id", app)], [("request_percentage", 12.5, False)]),
            ([("client-id", None)], [("consumer_byte_rate", 5000, False)]),
        ], version=version)
        assert [e.error_code for e in result.entries] == [0, 0, 0]
        assert describe(c, [("user", 0, alice)], strict=True, version=version)[2] == {
            frozenset({("user", alice)}): {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2000.0}}
        # Not strict: every entity with that user, the pair included.
        assert len(describe(c, [("user", 0, alice)], version=version)[2]) == 2
        assert describe(c, [("client-id", 1, None)], strict=True, version=version)[2] == {
            frozenset({("client-id", None)}): {"consumer_byte_rate": 5000.0}}
        # Removing a key, then the last key, drops the entity.
        alter(c, [([("user", alice)], [("producer_byte_rate", 0, True), ("consumer_byte_rate", 0, True)])],
              version=version)
        assert describe(c, [("user", 0, alice)], strict=True, version=version)[2] == {}
        alter(c, [([("client-id", None)], [("consumer_byte_rate", 0, True)])], version=version)


def test_alter_errors_are_per_entity_with_kafkas_messages(broker, unique):
    good = unique("good")
    with WireClient(broker.bootstrap) as c:
        result = alter(c, [
            ([("user", good)], [("producer_byte_rate", 100, False)]),
            ([("user", unique("u"))], [("producer_byte_rate", 1.5, False)]),
            ([("user", unique("u"))], [("no_such_key", 1, False)]),
            ([("user", unique("u"))], [("consumer_byte_rate", -1, False)]),
            ([("client-id", unique("c"))], [("producer_ids_rate", 1, False)]),  # a user-only key
            ([], [("producer_byte_rate", 1, False)]),
        ])
        codes = [(e.error_code, e.error_message) for e in result.entries]
        assert codes[0] == (0, None)
        assert [code for code, _ in codes[1:]] == [42] * 5
        assert codes[1][1] == "producer_byte_rate cannot be a fractional value."
        assert codes[2][1] == "Invalid configuration key no_such_key"
        assert codes[3][1] == "Quota consumer_byte_rate must be greater than 0"
        assert codes[4][1] == "Invalid configuration key producer_ids_rate"
        assert codes[5][1] == "Invalid empty client quota entity"
        # validate_only changes nothing.
        alter(c, [([("user", good)], [("producer_byte_rate", 999, False)])], validate_only=True)
        assert describe(c, [("user", 0, good)], strict=True)[2] == {
            frozenset({("user", good)}): {"producer_byte_rate": 100.0}}


@pytest.mark.parametrize("components, code", [
    ([("user", 0, None)], 42),  # exact with no name
    ([("user", 1, "x")], 42),  # default with a name
    ([("user", 2, None), ("user", 2, None)], 42),  # a type twice
    ([("ip", 2, None), ("user", 2, None)], 42),  # ip mixed with user
    ([("group", 2, None)], 35),  # unknown entity type
])
def test_describe_filter_errors_are_top_level(broker, components, code):
    with WireClient(broker.bootstrap) as c:
        error, message, found = describe(c, components)
    assert error == code and message and found is None


def test_quotas_persist_across_a_restart_and_apply_at_once(start_broker, tmp_path):
    data = tmp_path / "data"
    with start_broker(data) as running:
        with WireClient(running.bootstrap) as c:
            alter(c, [([("user", None), ("client-id", "app")], [("producer_byte_rate", 4096, False)]),
                      ([("user", "bob")], [("producer_ids_rate", 2, False)])])
    with metadata_of(data) as controller:  # kept in the metadata log
        assert controller.image.client_quotas.entities == {
            (("client-id", "app"), ("user", None)): {"producer_byte_rate": 4096.0},
            (("user", "bob"),): {"producer_ids_rate": 2.0},
        }
    with start_broker(data) as running:
        with WireClient(running.bootstrap) as c:
            assert describe(c, [])[2] == {
                frozenset({("user", None), ("client-id", "app")}): {"producer_byte_rate": 4096.0},
                frozenset({("user", "bob")}): {"producer_ids_rate": 2.0},
            }
        broker = running.broker
        # Replayed into the managers: the quota that applies to ANONYMOUS/app is the stored one.
        assert running.in_broker(broker.quotas.produce.quota_limit, "ANONYMOUS", "app") == 4096.0
        assert running.in_broker(broker.pid_quota.quota_for, "bob") == 2.0


def test_a_malformed_quota_file_of_an_earlier_version_stops_the_broker_with_its_path(start_broker, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "client-quotas.json").write_text("{not json")
    with pytest.raises(BaseException) as info:  # raised inside trio: possibly in an exception group
        with start_broker(data):
            pass
    error = info.value
    while isinstance(error, BaseExceptionGroup):
        [error] = error.exceptions
    assert isinstance(error, ValueError) and "client-quotas.json: malformed quota store" in str(error)


def test_the_cli_reports_a_start_up_failure_in_one_line(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "client-quotas.json").write_text("{not json")
    result = subprocess.run(MINIBROKER + ["serve", "--listen", "127.0.0.1:0", "--data-dir", str(data)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("minibroker: ")
    assert "client-quotas.json: malformed quota store" in result.stderr


# ---- minibroker configs ------------------------------------------------------------------------


def configs(bootstrap, *args):
    return subprocess.run(MINIBROKER + ["configs", "--bootstrap-server", bootstrap, *args],
                          capture_output=True, text=True, timeout=60)


def test_configs_cli_end_to_end(broker, unique):
    user, client = unique("alice"), unique("slow")
    b = broker.bootstrap
    done = configs(b, "--alter", "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2000",
                   "--entity-type", "users", "--entity-name", user)
    assert done.returncode == 0 and done.stdout == f"Completed updating config for user {user}.\n"
    assert configs(b, "--alter", "--add-config", "producer_byte_rate=500000", "--entity-type", "users",
                   "--entity-name", user, "--entity-type", "clients", "--entity-name", client).returncode == 0
    default = configs(b, "--alter", "--add-config", "request_percentage=200", "--entity-type", "clients",
                      "--entity-default")
    assert default.stdout == "Completed updating default config for clients in the cluster.\n"

    described = configs(b, "--describe", "--entity-type", "users", "--entity-name", user).stdout
    assert described == (f"Quota configs for user-principal '{user}' are "
                         "consumer_byte_rate=2000.0, producer_byte_rate=1048576.0\n")
    pair = configs(b, "--describe", "--user", user, "--entity-type", "clients").stdout
    assert pair == f"Quota configs for user-principal '{user}', client-id '{client}' are producer_byte_rate=500000.0\n"
    assert "Quota configs for the default client-id are request_percentage=200.0" in configs(
        b, "--describe", "--client-defaults").stdout

    assert configs(b, "--alter", "--delete-config", "producer_byte_rate", "--entity-type", "users",
                   "--entity-name", user).returncode == 0
    assert "producer_byte_rate" not in configs(b, "--describe", "--user", user).stdout
    configs(b, "--alter", "--delete-config", "request_percentage", "--client-defaults")


@pytest.mark.parametrize("args, message", [
    (["--alter", "--add-config", "producer_byte_rate=1.5", "--user", "x"], "cannot be a fractional value"),
    (["--alter", "--add-config", "producer_byte_rate=lots", "--user", "x"], "Cannot parse quota configuration value"),
    (["--alter", "--add-config", "bogus=1", "--user", "x"], "unknown quota config 'bogus'"),
    (["--alter", "--delete-config", "consumer_byte_rate", "--user", "nobody"], "Invalid config(s): consumer_byte_rate"),
    (["--alter", "--add-config", "producer_byte_rate=1", "--entity-type", "users"], "--entity-name or --entity-default"),
    (["--alter", "--entity-type", "users", "--entity-name", "x"], "--add-config or --delete-config"),
    (["--describe", "--entity-name", "x"], "more entity names than entity types"),
])
def test_configs_cli_errors_are_clear(broker, args, message):
    result = configs(broker.bootstrap, *args)
    assert result.returncode == 1 and message in result.stderr and not result.stdout


def test_configs_cli_without_a_broker_says_so():
    result = configs("127.0.0.1:1", "--describe")
    assert result.returncode == 1 and "cannot connect to 127.0.0.1:1" in result.stderr


def test_configs_cli_over_sasl(start_broker, tmp_path):
    properties = tmp_path / "client.properties"
    properties.write_text('security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n'
                          'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
                          'username="admin" password="admin-pw";\n')
    with start_broker(sasl_users={"admin": "admin-pw"}) as running:
        ok = configs(running.sasl_bootstrap, "--command-config", str(properties), "--alter",
                     "--add-config", "producer_byte_rate=1000", "--user", "admin")
        assert ok.returncode == 0, ok.stderr
        properties.write_text(properties.read_text().replace('"admin-pw"', '"wrong"'))
        bad = configs(running.sasl_bootstrap, "--command-config", str(properties), "--describe")
        assert bad.returncode == 1 and "Authentication failed" in bad.stderr
