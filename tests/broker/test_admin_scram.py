"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554): SASL/SCRAM users created
and removed while the broker runs, kept across restarts as salted keys only; Kafka's errors over the
wire; the calls of Java's Admin, confluent-kafka and kafka-python; and a user created live logging in
with SCRAM from a real client."""

import base64
import hashlib
import os
import stat
import time

import pytest

from minibroker.admin_client import AdminClient, AdminClientError
from tests.support.metadata import metadata_of

SHA256, SHA512 = 1, 2
USERS = {"admin": "admin-secret"}


def upsert(name, mechanism, password, iterations=4096, salt=b"0123456789abcdef"):
    digest = "sha256" if mechanism == SHA256 else "sha512"
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, max(iterations, 1))
    return {"name": name, "mechanism": mechanism, "iterations": iterations, "salt": salt, "salted_password": salted}


def alter(admin, deletions=(), upsertions=()):
    response = admin.call(51, {"deletions": [{"name": n, "mechanism": m} for n, m in deletions],
                               "upsertions": list(upsertions)})
    return [(r.user, int(r.error_code), r.error_message) for r in response.results]


def describe(admin, users=None):
    response = admin.call(50, {"users": None if users is None else [{"name": u} for u in users]})
    assert response.error_code == 0
    return [(r.user, int(r.error_code), r.error_message, [(c.mechanism, c.iterations) for c in r.credential_infos])
            for r in response.results]


def logs_in(bootstrap, mechanism, user, password) -> bool:
    try:
        with AdminClient(bootstrap, sasl_mechanism=mechanism, sasl_username=user, sasl_password=password):
            return True
    except AdminClientError:
        return False


@pytest.fixture
def sasl(start_broker, tmp_path):
    with start_broker(tmp_path / "sasl", sasl_users=USERS) as running:
        yield running


def test_alter_refusals_are_kafkas(sasl):
    with AdminClient(sasl.bootstrap) as admin:
        assert alter(admin, upsertions=[upsert("", SHA256, "x"), upsert("m0", 0, "x"), upsert("m3", 3, "x"),
                                        upsert("few", SHA256, "x", 4095), upsert("many", SHA512, "x", 16385)]) == [
            ("", 93, "Username must not be empty"), ("m0", 33, "Unknown SCRAM mechanism"),
            ("m3", 33, "Unknown SCRAM mechanism"), ("few", 93, "Too few iterations"),
            ("many", 93, "Too many iterations")]
        assert alter(admin, deletions=[("nobody", SHA256), ("admin", 7)]) == [
            ("nobody", 91, "Attempt to delete a user credential that does not exist"),
            ("admin", 33, "Unknown SCRAM mechanism")]
        # One user altered twice in a request, whatever the mechanisms: Kafka refuses them all.
        assert alter(admin, deletions=[("admin", SHA256), ("admin", SHA512)]) == [
            ("admin", 92, "A user credential cannot be altered twice in the same request")]
        assert alter(admin, deletions=[("admin", SHA256)], upsertions=[upsert("admin", SHA512, "y")]) == [
            ("admin", 92, "A user credential cannot be altered twice in the same request")]
        assert alter(admin, upsertions=[upsert("eve", SHA256, "a"), upsert("eve", SHA512, "b")]) == [
            ("eve", 92, "A user credential cannot be altered twice in the same request")]
        # Errors come after the successes, and do not stop them.
        assert alter(admin, deletions=[("admin", SHA512)], upsertions=[upsert("carol", SHA256, "c"),
                                                                        upsert("dan", SHA256, "d", 10)]) == [
            ("admin", 0, None), ("carol", 0, None), ("dan", 93, "Too few iterations")]
        assert describe(admin) == [("admin", 0, None, [(SHA256, 4096)]), ("carol", 0, None, [(SHA256, 4096)])]
        assert describe(admin, ["carol", "zed", "carol"]) == [
            ("carol", 92, "Cannot describe SCRAM credentials for the same user twice in a single request: carol", []),
            ("zed", 91, "Attempt to describe a user credential that does not exist: zed", [])]
        assert describe(admin, []) == describe(admin)
        # The passwords of sasl.users never leave through DescribeConfigs, synonyms included.
        response = admin.call(32, {"resources": [{"resource_type": 4, "resource_name": str(sasl.broker.node_id),
                                                  "configuration_keys": ["sasl.users"]}],
                                   "include_synonyms": True, "include_documentation": False})
        (entry,) = response.results[0].configs
        assert (entry.value, entry.is_sensitive, entry.read_only) == (None, True, True)
        assert [(s.name, s.value, s.source) for s in entry.synonyms] == [("sasl.users", None, 4)]


def test_users_created_and_removed_live_and_across_restarts(start_broker, tmp_path):
    """A user created live logs in at once, with its own iteration count; deleting it (or a sasl.users
    user's credential) refuses the next login; all of it holds after a restart. The metadata log keeps
    salted keys only, neither the password nor the salted password, in a directory of the owner's."""
    data = tmp_path / "scram"
    carol = upsert("carol", SHA512, "carol-pw", iterations=8192)
    with start_broker(data, sasl_users=USERS) as running, AdminClient(running.bootstrap) as admin:
        assert not logs_in(running.sasl_bootstrap, "SCRAM-SHA-512", "carol", "carol-pw")
        assert alter(admin, deletions=[("admin", SHA256)], upsertions=[carol]) == [("admin", 0, None), ("carol", 0, None)]
        assert logs_in(running.sasl_bootstrap, "SCRAM-SHA-512", "carol", "carol-pw")
        assert not logs_in(running.sasl_bootstrap, "SCRAM-SHA-512", "carol", "wrong")
        assert not logs_in(running.sasl_bootstrap, "SCRAM-SHA-256", "admin", USERS["admin"])
        assert logs_in(running.sasl_bootstrap, "PLAIN", "admin", USERS["admin"])  # PLAIN is not SCRAM's
    metadata_dir = data / "__cluster_metadata-0"
    text = b"".join(path.read_bytes() for path in metadata_dir.iterdir())
    assert b"carol-pw" not in text and carol["salted_password"].hex().encode() not in text
    assert base64.b64encode(carol["salted_password"]) not in text
    assert stat.S_IMODE(os.stat(metadata_dir).st_mode) == 0o700  # salted keys: the owner's only
    with metadata_of(data) as controller:
        credentials = controller.image.scram.credentials
        assert credentials[("admin", SHA256)] is None  # a sasl.users credential removed stays removed
        assert credentials[("carol", SHA512)].iterations == 8192
    with start_broker(data, sasl_users=USERS) as running, AdminClient(running.bootstrap) as admin:
        assert logs_in(running.sasl_bootstrap, "SCRAM-SHA-512", "carol", "carol-pw")
        assert not logs_in(running.sasl_bootstrap, "SCRAM-SHA-256", "admin", USERS["admin"])
        assert logs_in(running.sasl_bootstrap, "SCRAM-SHA-512", "admin", USERS["admin"])
        assert describe(admin) == [("admin", 0, None, [(SHA512, 4096)]), ("carol", 0, None, [(SHA512, 8192)])]
        assert alter(admin, deletions=[("carol", SHA512)], upsertions=[upsert("admin", SHA256, "new-pw")]) == [
            ("carol", 0, None), ("admin", 0, None)]
        assert not logs_in(running.sasl_bootstrap, "SCRAM-SHA-512", "carol", "carol-pw")
        assert logs_in(running.sasl_bootstrap, "SCRAM-SHA-256", "admin", "new-pw")
    with start_broker(data, sasl_users=USERS) as running:
        assert not logs_in(running.sasl_bootstrap, "SCRAM-SHA-512", "carol", "carol-pw")
        assert logs_in(running.sasl_bootstrap, "SCRAM-SHA-256", "admin", "new-pw")


def confluent_logs_in(bootstrap, mechanism, user, password) -> bool:
    """A confluent-kafka producer delivers one record (True) or reports an authentication error."""
    from confluent_kafka import KafkaError, Producer

    errors, delivered = [], []
    producer = Producer({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
                         "error_cb": errors.append, "message.timeout.ms": 20000})
    try:
        producer.produce("scram-live", b"hello", on_delivery=lambda err, msg: delivered.append(err))
        deadline = time.monotonic() + 20
        while not delivered and not errors and time.monotonic() < deadline:
            producer.poll(0.1)
        if errors:
            assert errors[0].code() == KafkaError._AUTHENTICATION, errors[0]
            return False
        assert delivered == [None]
        return True
    finally:
        producer.purge()
        del producer


@pytest.mark.interop
def test_clients_create_users_that_then_log_in(java, sasl, unique):
    """Java's alterUserScramCredentials and describeUserScramCredentials, confluent-kafka's and
    kafka-python's: users they create log in with confluent-kafka (librdkafka) over SCRAM."""
    from confluent_kafka.admin import (AdminClient as ConfluentAdmin, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialUpsertion)
    from kafka.admin import KafkaAdminClient
    from kafka.admin import ScramMechanism as KpMechanism
    from kafka.admin import UserScramCredentialDeletion, UserScramCredentialUpsertion as KpUpsertion

    b = sasl.bootstrap
    out = java.run(["alter-scram", b, "upsert:jane:256:jane-pw:4096,upsert:jim:512:jim-pw:100"],
                   ["describe-scram", b], ["describe-scram", b, "jane,ghost"])
    assert [(line["user"], line["error"], line["message"]) for line in out if line["type"] == "scram-altered"] == [
        ("jane", None, None), ("jim", "UnacceptableCredentialException", "Too few iterations")]
    described = [line for line in out if line["type"] == "scram-user"]
    assert [(d["user"], d["credentials"]) for d in described[:2]] == [
        ("admin", [["SCRAM-SHA-256", 4096], ["SCRAM-SHA-512", 4096]]), ("jane", [["SCRAM-SHA-256", 4096]])]
    assert [(d["user"], d["error"]) for d in described[2:]] == [("jane", None), ("ghost", "ResourceNotFoundException")]
    assert confluent_logs_in(sasl.sasl_bootstrap, "SCRAM-SHA-256", "jane", "jane-pw")
    assert not confluent_logs_in(sasl.sasl_bootstrap, "SCRAM-SHA-256", "jane", "not-jane-pw")

    admin = ConfluentAdmin({"bootstrap.servers": b})
    try:
        futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "kim", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 10000), b"kim-pw")])
        futures["kim"].result(timeout=30)
        description = admin.describe_user_scram_credentials(["kim"])["kim"].result(timeout=30)
        assert [(i.mechanism, i.iterations) for i in description.scram_credential_infos] == [
            (ScramMechanism.SCRAM_SHA_512, 10000)]
    finally:
        del admin
    assert confluent_logs_in(sasl.sasl_bootstrap, "SCRAM-SHA-512", "kim", "kim-pw")

    kp = KafkaAdminClient(bootstrap_servers=b)
    try:
        assert kp.alter_user_scram_credentials([KpUpsertion("lee", KpMechanism.SCRAM_SHA_256, "lee-pw"),
                                                UserScramCredentialDeletion("jane", KpMechanism.SCRAM_SHA_256)]) == {
            "lee": None, "jane": None}
        assert set(kp.describe_user_scram_credentials()) == {"admin", "kim", "lee"}
    finally:
        kp.close()
    assert confluent_logs_in(sasl.sasl_bootstrap, "SCRAM-SHA-256", "lee", "lee-pw")
    assert not confluent_logs_in(sasl.sasl_bootstrap, "SCRAM-SHA-256", "jane", "jane-pw")
