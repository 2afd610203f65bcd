"""`minibroker acls` against a broker process, as kafka-acls.sh is used: add (operations, --producer,
--consumer, prefixed patterns), list (all, per resource, MATCH), remove; its output in AclCommand's
form; an error for a broker without an authorizer and for a principal not allowed to alter ACLs; over
TLS with --command-config. And the ACLs kept across kill -9: the broker started again on the same
data decides as before."""

from __future__ import annotations

import io
import signal

import pytest

from minibroker.cli import build_parser, main
from minibroker.testing import spawn_broker, stop_process
from minibroker.tls_material import TlsMaterial

AUTHORIZER = {"authorizer_class_name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "super_users": "User:ANONYMOUS"}


def acls(bootstrap: str, *args: str) -> tuple[int, str, str]:
    from minibroker import acls_cli

    parsed = build_parser().parse_args(["acls", "--bootstrap-server", bootstrap, *args])
    out, err = io.StringIO(), io.StringIO()
    return acls_cli.run(parsed, out, err), out.getvalue(), err.getvalue()


@pytest.fixture
def broker(tmp_path):
    proc, fields = spawn_broker(tmp_path / "data", overrides=AUTHORIZER)
    try:
        yield proc, fields["bootstrap.servers"], tmp_path / "data"
    finally:
        stop_process(proc)


def test_add_list_and_remove_as_kafka_acls_does(broker):
    _, bootstrap, _ = broker
    code, out, err = acls(bootstrap, "--add", "--allow-principal", "User:alice", "--operation", "Read",
                          "--operation", "Write", "--topic", "orders")
    assert code == 0, err
    assert out.splitlines()[:3] == [
        "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`: ",
        " \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW) ",
        " \t(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW) ",
    ]
    assert acls(bootstrap, "--add", "--allow-principal", "User:bob", "--producer", "--topic", "pay-",
                "--resource-pattern-type", "prefixed", "--idempotent")[0] == 0
    assert acls(bootstrap, "--add", "--allow-principal", "User:carol", "--consumer", "--topic", "orders",
                "--group", "billing")[0] == 0
    assert acls(bootstrap, "--add", "--deny-principal", "User:eve", "--deny-host", "10.0.0.66", "--operation", "All",
                "--topic", "*")[0] == 0
    _, everything, _ = acls(bootstrap, "--list")
    assert "resourceType=CLUSTER, name=kafka-cluster, patternType=LITERAL" in everything
    assert "(principal=User:bob, host=*, operation=IDEMPOTENT_WRITE, permissionType=ALLOW)" in everything
    assert "(principal=User:carol, host=*, operation=READ, permissionType=ALLOW)" in everything
    assert "(principal=User:eve, host=10.0.0.66, operation=ALL, permissionType=DENY)" in everything
    # MATCH: every pattern that applies to the topic "orders": its own and the wildcard's.
    _, matching, _ = acls(bootstrap, "--list", "--topic", "orders", "--resource-pattern-type", "match")
    assert "name=orders, patternType=LITERAL" in matching and "name=*, patternType=LITERAL" in matching
    assert "name=pay-" not in matching
    _, alice_only, _ = acls(bootstrap, "--list", "--principal", "User:alice")
    assert "User:carol" not in alice_only and alice_only.count("User:alice") == 2
    code, out, _ = acls(bootstrap, "--remove", "--allow-principal", "User:alice", "--operation", "Read", "--topic",
                        "orders")
    assert (code, out.strip()) == (0, "Removed 1 ACL(s).")
    _, after, _ = acls(bootstrap, "--list", "--topic", "orders")
    assert "operation=READ, permissionType=ALLOW) " not in after.split("User:alice")[1].split("\n")[0]
    assert "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in after


def test_the_acls_survive_kill_9(tmp_path):
    data = tmp_path / "data"
    proc, fields = spawn_broker(data, overrides=AUTHORIZER)
    try:
        bootstrap = fields["bootstrap.servers"]
        assert acls(bootstrap, "--add", "--allow-principal", "User:alice", "--operation", "Write", "--topic",
                    "orders")[0] == 0
        assert acls(bootstrap, "--add", "--allow-principal", "User:*", "--operation", "Describe", "--topic",
                    "public-", "--resource-pattern-type", "prefixed")[0] == 0
        assert acls(bootstrap, "--remove", "--allow-principal", "User:*", "--operation", "Describe", "--topic",
                    "public-", "--resource-pattern-type", "prefixed")[0] == 0
        _, before, _ = acls(bootstrap, "--list")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        if proc.stdout is not None:
            proc.stdout.close()
    proc, fields = spawn_broker(data, overrides=AUTHORIZER)
    try:
        _, after, _ = acls(fields["bootstrap.servers"], "--list")
    finally:
        stop_process(proc)
    assert after == before and "User:alice" in after and "public-" not in after
    # Kept where Kafka keeps them: the cluster metadata log, and no file of their own.
    metadata_log = b"".join(p.read_bytes() for p in (data / "__cluster_metadata-0").glob("*.log"))
    assert metadata_log.count(b'"type":"AccessControlEntryRecord"') == 2
    assert metadata_log.count(b'"type":"RemoveAccessControlEntryRecord"') == 1
    assert sorted(p.name for p in data.glob("acl*")) == []


def test_without_an_authorizer_it_says_so(tmp_path):
    proc, fields = spawn_broker(tmp_path / "data")
    try:
        code, _, err = acls(fields["bootstrap.servers"], "--list")
    finally:
        stop_process(proc)
    assert code == 1 and "SECURITY_DISABLED: No Authorizer is configured on the broker" in err


def test_over_tls_with_a_command_config_and_a_principal_not_allowed(tmp_path):
    material = TlsMaterial.create(tmp_path / "tls")
    overrides = {**AUTHORIZER, **material.broker_properties("SSL", client_auth="required")}
    proc, fields = spawn_broker(tmp_path / "data", "--ssl-listen", "127.0.0.1:0", overrides=overrides)
    try:
        ssl_bootstrap = fields["SSL"]
        code, _, err = acls(ssl_bootstrap, "--command-config", str(material.directory / "client-mtls.properties"),
                            "--add", "--allow-principal", "User:x", "--topic", "t")
        assert code == 1 and "CLUSTER_AUTHORIZATION_FAILED" in err  # its principal is the certificate's
        assert acls(fields["bootstrap.servers"], "--add", "--allow-principal", "User:" + material.client.subject,
                    "--operation", "Alter", "--cluster")[0] == 0
        code, out, err = acls(ssl_bootstrap, "--command-config", str(material.directory / "client-mtls.properties"),
                              "--add", "--allow-principal", "User:x", "--topic", "t")
        assert code == 0, err
    finally:
        stop_process(proc)


def test_usage_errors_name_what_is_missing():
    for args, message in ((["--add", "--topic", "t"], "--add needs --allow-principal or --deny-principal"),
                          (["--add", "--allow-principal", "alice", "--topic", "t"], "a principal is TYPE:NAME"),
                          (["--add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"],
                           "unknown operation 'Fly'"),
                          (["--remove", "--allow-principal", "User:a"], "--remove needs a resource")):
        # The usage is checked before anything is sent: no broker needed.
        code, _, err = acls("127.0.0.1:1", *args)
        assert code == 1 and message in err, err


def test_help_names_the_command():
    with pytest.raises(SystemExit):
        main(["acls", "--help"])
