"""SaslHandshake and SaslAuthenticate on the SASL_PLAINTEXT listener (user alice on both brokers)."""

from __future__ import annotations

from minibroker.sasl import ScramClient
from tests.support.conformance import Run, scenario
from tests.support.kafka_reference import SASL_USERS

PASSWORD = SASL_USERS["alice"]


def _connect(run: Run, name: str):
    return run.conn(name, sasl=True)


@scenario("sasl/plain", apis=(17, 36))
def _(run: Run) -> None:
    """SaslHandshake v1 (mechanisms offered), an unknown mechanism, PLAIN with the right password
    (v0 and v2) and a wrong one (SASL_AUTHENTICATION_FAILED, then the connection is closed)."""
    _connect(run, "unknown")
    run.call(17, 1, {"mechanism": "GSSAPI"}, conn="unknown", label="unsupported mechanism")
    for version in (0, 2):
        _connect(run, f"ok{version}")
        run.call(17, 1, {"mechanism": "PLAIN"}, conn=f"ok{version}")
        run.call(36, version, {"auth_bytes": f"\0alice\0{PASSWORD}".encode()}, conn=f"ok{version}",
                 label=f"PLAIN v{version}", drop=("session_lifetime",))
        run.call(3, 12, {"topics": [], "allow_auto_topic_creation": False}, conn=f"ok{version}",
                 label="a request after authenticating", drop=("brokers", "cluster_id"))
    _connect(run, "bad")
    run.call(17, 1, {"mechanism": "PLAIN"}, conn="bad")
    run.call(36, 2, {"auth_bytes": b"\0alice\0wrong"}, conn="bad", label="wrong password")
    run.note("closed after the failure", run.conn("bad").closed_by_peer())


@scenario("sasl/scram", apis=(17, 36))
def _(run: Run) -> None:
    """SCRAM-SHA-256 and -512: the full exchange, a wrong password, an unknown user."""
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        for user, password, label in (("alice", PASSWORD, "ok"), ("alice", "wrong", "wrong password"),
                                      ("nobody", "x", "unknown user")):
            conn = f"{mechanism}-{label}"
            _connect(run, conn)
            run.call(17, 1, {"mechanism": mechanism}, conn=conn, label=f"{mechanism} handshake")
            client = ScramClient(mechanism, user, password)
            first = run.call(36, 2, {"auth_bytes": client.first_message()}, conn=conn,
                             label=f"{mechanism} {label}: first", drop=("auth_bytes",))
            if first.error_code:
                continue
            final = run.call(36, 2, {"auth_bytes": client.final_message(bytes(first.auth_bytes))}, conn=conn,
                             label=f"{mechanism} {label}: final", drop=("auth_bytes", "session_lifetime"))
            run.note(f"{mechanism} {label}: server signature verified",
                     final.error_code == 0 and _verified(client, bytes(final.auth_bytes)))


def _verified(client: ScramClient, server_final: bytes) -> bool:
    try:
        client.verify_server_final(server_final)
        return True
    except Exception:
        return False


@scenario("sasl/before-authentication", apis=(17, 18))
def _(run: Run) -> None:
    """On the SASL listener before authenticating: ApiVersions is answered, Metadata closes the
    connection."""
    _connect(run, "a")
    run.call(18, 3, {"client_software_name": "conformance", "client_software_version": "1"}, conn="a",
             label="ApiVersions", drop=("api_keys", "supported_features", "finalized_features",
                                        "finalized_features_epoch", "zk_migration_ready"))
    _connect(run, "b")
    run.send(3, 12, {"topics": [], "allow_auto_topic_creation": False}, conn="b", answered=False)
    run.note("closed on Metadata before authentication", run.conn("b").closed_by_peer())
