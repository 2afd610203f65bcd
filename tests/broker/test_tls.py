"""TLS listeners over real sockets: Kafka's protocol over SSL, client certificates (none, requested,
required) and the principal each gives through ssl.principal.mapping.rules; certificates refused at
the handshake (untrusted, expired, missing; a client that does not trust the broker or asks for
another name); bad input costing one connection and one log line (plaintext bytes on an SSL port, a
TLS hello on a plaintext port, a handshake that never completes, in connections.max.idle.ms); the
connection limits before the handshake; and the keystore and truststore forms (PEM files, inline
PEM, PKCS12, JKS refused), protocols and cipher suites."""

from __future__ import annotations

import logging
import socket
import ssl

import pytest

from minibroker.config import BrokerConfig, ConfigError
from minibroker.testing import running_broker
from minibroker.tls import openssl_cipher_name, server_context
from minibroker.tls_material import STORE_PASSWORD, TlsMaterial
from tests.support.security import PRINCIPAL_RECORDER, metadata
from tests.support.wire import WireClient, schema

MAPPING = "RULE:^CN=([^,]+),OU=clients,.*$/$1/L,DEFAULT"


@pytest.fixture(scope="module")
def material(tmp_path_factory) -> TlsMaterial:
    return TlsMaterial.create(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_broker(material, tmp_path_factory):
    with running_broker(tmp_path_factory.mktemp("tls-broker"), tls=material,
                        authorizer_class_name=PRINCIPAL_RECORDER,
                        properties={"listener.name.mtls.ssl.principal.mapping.rules": MAPPING,
                                    "listener.name.ssl.ssl.client.auth": "requested"}) as running:
        yield running


def client_context(material: TlsMaterial, cert=None, *, check_hostname: bool = True) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(material.ca_file))
    context.check_hostname = check_hostname
    if cert is not None:
        context.load_cert_chain(str(cert.cert), str(cert.key))
    return context


def api_versions(client):
    return client.request(schema(18, 3)(client_software_name="t", client_software_version="1"))


def principals_of(running, listener: str, context: ssl.SSLContext) -> set[str]:
    recorder = running.broker.authorizer
    recorder.clear()
    with WireClient(running.listener(listener), ssl_context=context) as client:
        metadata(client)
    return recorder.principals(listener)


def test_kafka_over_the_ssl_listener(tls_broker, material):
    with WireClient(tls_broker.ssl_bootstrap, ssl_context=client_context(material)) as client:
        assert api_versions(client).error_code == 0
        answer = metadata(client)
        # The SSL listener advertises itself to its clients.
        assert {(b.host, b.port) for b in answer.brokers} == {tuple(tls_broker.broker.listeners["SSL"])}
        assert client.sock.version() in ("TLSv1.3", "TLSv1.2")


def test_the_principal_of_each_listener(tls_broker, material):
    ssl_none = principals_of(tls_broker, "SSL", client_context(material))
    ssl_with_cert = principals_of(tls_broker, "SSL", client_context(material, material.client))
    mtls = principals_of(tls_broker, "MTLS", client_context(material, material.client))
    alice = material.issue_client("alice-cert", common_name="Alice")
    mtls_alice = principals_of(tls_broker, "MTLS", client_context(material, alice))
    plaintext = tls_broker.broker.authorizer
    plaintext.clear()
    with WireClient(tls_broker.bootstrap) as client:
        metadata(client)
    assert ssl_none == {"User:ANONYMOUS"}  # ssl.client.auth=requested, no certificate sent
    # DEFAULT: the whole subject, as Java's X500Principal writes it.
    assert ssl_with_cert == {"User:CN=client,OU=clients,O=minibroker"}
    assert mtls == {"User:client"} and mtls_alice == {"User:alice"}  # the MTLS listener's own rules
    assert plaintext.principals("PLAINTEXT") == {"User:ANONYMOUS"}


def refused_handshake(bootstrap: str, context: ssl.SSLContext, server_hostname: str | None = None) -> Exception:
    """The error a client meets when the handshake (or the first read after it: TLS 1.3 reports a
    refused client certificate there) fails."""
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)) as info:
        with WireClient(bootstrap, ssl_context=context, server_hostname=server_hostname, timeout=10) as client:
            api_versions(client)
    return info.value


def one_line(caplog, text: str) -> str:
    lines = [r.getMessage() for r in caplog.records if text in r.getMessage()]
    assert len(lines) == 1, lines
    return lines[0]


def test_mtls_refuses_a_client_without_a_certificate(tls_broker, material, caplog):
    with caplog.at_level(logging.INFO, logger="minibroker.server"):
        refused_handshake(tls_broker.mtls_bootstrap, client_context(material))
        line = wait_for_line(caplog, "listener MTLS")
    assert "sent no certificate" in line or "certificate" in line


def wait_until(check, timeout: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def wait_for_line(caplog, text: str, timeout: float = 10.0) -> str:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [r.getMessage() for r in caplog.records if text in r.getMessage()]
        if found:
            assert len(found) == 1, found
            return found[0]
        time.sleep(0.02)
    raise AssertionError(f"no log line with {text!r}: {[r.getMessage() for r in caplog.records]}")


def test_untrusted_and_expired_client_certificates_are_refused(tls_broker, material, tmp_path, caplog):
    other = TlsMaterial.create(tmp_path / "other")
    expired = material.issue_client("expired", expired=True)
    with caplog.at_level(logging.INFO, logger="minibroker.server"):
        refused_handshake(tls_broker.mtls_bootstrap, client_context(material, other.client))
        untrusted = wait_for_line(caplog, "listener MTLS")
        caplog.clear()
        refused_handshake(tls_broker.mtls_bootstrap, client_context(material, expired))
        too_old = wait_for_line(caplog, "listener MTLS")
    assert "does not verify" in untrusted and "unable to get local issuer certificate" in untrusted
    assert "does not verify" in too_old and "expired" in too_old


def test_a_client_that_does_not_trust_the_broker_or_wants_another_name_fails_the_handshake(
        tls_broker, material, tmp_path, caplog):
    other = TlsMaterial.create(tmp_path / "other")
    with caplog.at_level(logging.INFO, logger="minibroker.server"):
        error = refused_handshake(tls_broker.ssl_bootstrap, client_context(other))
        assert isinstance(error, ssl.SSLCertVerificationError)
        wait_for_line(caplog, "does not trust this listener's certificate")
        caplog.clear()
        error = refused_handshake(tls_broker.ssl_bootstrap, client_context(material), server_hostname="kafka.example")
        assert isinstance(error, ssl.SSLCertVerificationError) and "Hostname mismatch" in str(error)
        wait_for_line(caplog, "listener SSL")


def test_plaintext_bytes_on_the_ssl_port_cost_one_connection_and_one_line(tls_broker, caplog):
    with caplog.at_level(logging.INFO, logger="minibroker.server"):
        with WireClient(tls_broker.ssl_bootstrap) as plain:
            plain.send_raw(b"\x00\x00\x00\x10" + b"\x00\x12\x00\x03" + b"\x00" * 12)
            assert plain.is_closed_by_peer()
        line = wait_for_line(caplog, "listener SSL")
    assert "PLAINTEXT bytes on an SSL listener" in line
    with WireClient(tls_broker.bootstrap) as client:  # the broker carries on
        assert api_versions(client).error_code == 0


def test_tls_on_the_plaintext_port_costs_one_connection_and_one_line(tls_broker, material, caplog):
    with caplog.at_level(logging.INFO, logger="minibroker.server"):
        refused_handshake(tls_broker.bootstrap, client_context(material))
        line = wait_for_line(caplog, "TLS handshake: the client uses SSL on the PLAINTEXT listener")
    assert "closing connection from 127.0.0.1" in line


def test_a_handshake_that_never_completes_is_closed_in_connections_max_idle_ms(material, tmp_path, caplog):
    with running_broker(tmp_path / "data", tls=material) as running:
        with caplog.at_level(logging.INFO, logger="minibroker.server"):
            with socket.create_connection(tuple(running.broker.listeners["SSL"]), timeout=10) as silent, \
                    socket.create_connection(tuple(running.broker.listeners["SSL"]), timeout=10) as half:
                half.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # the start of a ClientHello
                # Both are in their handshakes once the broker counts them (nothing waits in between).
                wait_until(lambda: running.in_broker(lambda: running.broker.metrics.connections) == 2)
                # Ten minutes on the broker's clock (connections.max.idle.ms is 600000), none in real time.
                running.in_broker(running.broker.clock.advance, 601)
                assert silent.recv(1) == b"" and half.recv(1) == b""
            lines = [r.getMessage() for r in caplog.records if "did not complete" in r.getMessage()]
        assert len(lines) == 2 and all("connections.max.idle.ms (600000 ms)" in line for line in lines)
        assert running.broker.metrics.failed_tls_handshakes == 2


def test_the_connection_limits_apply_before_the_handshake(material, tmp_path, caplog):
    with running_broker(tmp_path / "data", tls=material, max_connections_per_ip=2) as running:
        context = client_context(material)
        with WireClient(running.ssl_bootstrap, ssl_context=context) as one, \
                WireClient(running.ssl_bootstrap, ssl_context=context) as two:
            assert api_versions(one).error_code == 0 and api_versions(two).error_code == 0
            with caplog.at_level(logging.INFO, logger="minibroker.server"):
                refused_handshake(running.ssl_bootstrap, context)
                wait_for_line(caplog, "max.connections.per.ip=2")


# ---- keystores, truststores, protocols, cipher suites ----------------------------------------------


def ssl_config(material: TlsMaterial, **props: str) -> BrokerConfig:
    base = {"listeners": "SSL://127.0.0.1:0", "log.dirs": "/nonexistent",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(material.broker_keystore)}
    base.update({k.replace("_", "."): v for k, v in props.items()})
    return BrokerConfig(base)


def handshake_with(context_server: ssl.SSLContext, client: ssl.SSLContext) -> tuple[str, str]:
    """(TLS version, cipher) of an in-memory handshake between the two contexts."""
    server_in, server_out, client_in, client_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    server = context_server.wrap_bio(server_in, server_out, server_side=True)
    peer = client.wrap_bio(client_in, client_out, server_hostname="localhost")
    for _ in range(10):
        for side in (peer, server):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
        server_in.write(client_out.read())
        client_in.write(server_out.read())
    peer.do_handshake()
    return peer.version() or "", (peer.cipher() or ("",))[0]


def test_pem_inline_pkcs12_and_jks_keystores(material, tmp_path):
    client = client_context(material)
    pem = material.broker_keystore.read_text()
    key = pem[:pem.index("-----END PRIVATE KEY-----") + len("-----END PRIVATE KEY-----")]
    chain = pem[len(key):].strip()
    inline = BrokerConfig({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM", "ssl.keystore.key": key,
                           "ssl.keystore.certificate.chain": chain})
    assert handshake_with(server_context(inline, "SSL").context, client)[0]
    p12 = tmp_path / "broker.p12"
    from cryptography.hazmat.primitives.serialization import pkcs12

    p12.write_bytes(material.client.p12.read_bytes())  # a PKCS12 keystore: any key and chain of the CA
    as_p12 = ssl_config(material, ssl_keystore_type="PKCS12", ssl_keystore_location=str(material.client.p12),
                        ssl_keystore_password=STORE_PASSWORD)
    loose = client_context(material, check_hostname=False)
    assert handshake_with(server_context(as_p12, "SSL").context, loose)[0]
    # JKS, Kafka's default type, reads a PKCS12 file (Java's keystore.type.compat)...
    as_jks_named = ssl_config(material, ssl_keystore_type="JKS", ssl_keystore_location=str(material.client.p12),
                              ssl_keystore_password=STORE_PASSWORD)
    assert handshake_with(server_context(as_jks_named, "SSL").context, loose)[0]
    assert pkcs12 is not None
    # ... and refuses a real JKS file with the command that converts it.
    jks = tmp_path / "broker.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + b"\x00" * 64)
    with pytest.raises(ConfigError, match="keytool -importkeystore") as info:
        server_context(ssl_config(material, ssl_keystore_type="JKS", ssl_keystore_location=str(jks)), "SSL")
    assert info.value.key == "ssl.keystore.location"


@pytest.mark.parametrize("props, key, reason", [
    ({"ssl_keystore_location": "/no/such/file"}, "ssl.keystore.location", "cannot read /no/such/file"),
    ({"ssl_keystore_password": "x"}, "ssl.keystore.password", "a PEM keystore takes no store password"),
    ({"ssl_truststore_type": "PKCS12", "ssl_truststore_location": "TRUSTSTORE", "ssl_truststore_password": "wrong"},
     "ssl.truststore.password", "cannot open the PKCS12 truststore"),
    ({"ssl_cipher_suites": "TLS_NO_SUCH_SUITE_WITH_NOTHING"}, "ssl.cipher.suites", "is not a TLS 1.2 cipher suite"),
])
def test_a_keystore_or_setting_that_cannot_be_used_names_the_key(material, props, key, reason):
    props = {k: (str(material.truststore_p12) if v == "TRUSTSTORE" else v) for k, v in props.items()}
    with pytest.raises(ConfigError, match=reason) as info:
        server_context(ssl_config(material, **props), "SSL")
    assert info.value.key == key


def test_a_listener_without_a_keystore_names_it(material):
    with pytest.raises(ConfigError) as info:
        server_context(BrokerConfig({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": ""}), "SSL")
    assert info.value.key == "ssl.keystore.location"
    props = {"listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
             "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SSL",
             "listener.name.internal.ssl.keystore.location": "/missing.pem", "ssl.keystore.type": "PEM"}
    with pytest.raises(ConfigError) as info:
        server_context(BrokerConfig(props), "INTERNAL")
    assert info.value.key == "listener.name.internal.ssl.keystore.location"


def test_a_pkcs12_truststore_checks_client_certificates(material):
    config = ssl_config(material, ssl_client_auth="required", ssl_truststore_type="PKCS12",
                        ssl_truststore_location=str(material.truststore_p12), ssl_truststore_password=STORE_PASSWORD)
    server = server_context(config, "SSL")
    assert server.context.verify_mode == ssl.CERT_REQUIRED
    assert handshake_with(server.context, client_context(material, material.client))[0]


def test_protocols_and_cipher_suites_as_java_takes_them(material):
    suite = "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"  # trustme's keys are ECDSA
    tls12_only = server_context(ssl_config(material, ssl_cipher_suites=suite), "SSL").context
    # Java leaves TLS 1.3 off when no TLS 1.3 suite is listed; OpenSSL's name of the suite is used.
    assert handshake_with(tls12_only, client_context(material)) == ("TLSv1.2", openssl_cipher_name(suite))
    tls13 = server_context(ssl_config(material, ssl_enabled_protocols="TLSv1.3"), "SSL").context
    old_client = client_context(material)
    old_client.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError):
        handshake_with(tls13, old_client)
    assert handshake_with(tls13, client_context(material))[0] == "TLSv1.3"


@pytest.mark.parametrize("iana, openssl", [
    ("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "ECDHE-RSA-AES256-GCM-SHA384"),
    ("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"),
    ("TLS_DHE_RSA_WITH_AES_128_GCM_SHA256", "DHE-RSA-AES128-GCM-SHA256"),
    ("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", "ECDHE-RSA-AES128-SHA256"),
    ("TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", "ECDHE-RSA-AES256-SHA"),
    ("TLS_RSA_WITH_AES_128_GCM_SHA256", "AES128-GCM-SHA256"),
    ("TLS_RSA_WITH_AES_256_CBC_SHA256", "AES256-SHA256"),
    ("TLS_AES_128_GCM_SHA256", None),
])
def test_iana_suite_names_map_to_openssls(iana, openssl):
    assert openssl_cipher_name(iana) == openssl
