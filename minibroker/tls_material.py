"""Throwaway TLS material for a test broker: a CA, a broker certificate for this machine's names, and
client certificates for mTLS, made with the `trustme` package (what it exists for) and written as
files every client can read, with the client settings that use them.

`TlsMaterial.create(directory)` writes:

    ca.pem                     the CA certificate: what clients trust (ssl.ca.location, cafile, ...)
    broker.pem                 the broker's key (PKCS#8) and chain: its ssl.keystore.location (PEM)
    client.pem, client-cert.pem, client-key.pem
                               a client certificate (subject CN=client,OU=clients,O=minibroker) for
                               mTLS, together and apart (librdkafka and kafka-python take them apart)
    truststore.p12, client.p12 the same as PKCS12 stores, password `minibroker` (older Java setups)
    client-ssl.properties      Java client properties for the SSL listener
    client-mtls.properties     ... for an mTLS listener (with the client's keystore)

and knows the settings of each client library for SSL, mTLS and SASL_SSL (`confluent`,
`kafka_python`, `aiokafka`, `java`), and the broker properties that serve them (`broker_properties`).
`issue_client` makes more client certificates (another subject, an expired one) for tests.
Used by minibroker.testing (`running_broker(tls=True)`) and `minibroker serve --tls-self-signed DIR`.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

__all__ = ["ClientCertificate", "TlsMaterial", "STORE_PASSWORD"]

STORE_PASSWORD = "minibroker"
BROKER_NAMES = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class ClientCertificate:
    """A client's certificate and key: together (`pem`, PKCS#8 key first) and apart."""

    subject: str  # RFC 2253, as the broker sees it
    pem: Path
    cert: Path
    key: Path
    p12: Path


def _pkcs8(key_pem: bytes) -> bytes:
    from cryptography.hazmat.primitives.serialization import (Encoding, NoEncryption, PrivateFormat,
                                                              load_pem_private_key)

    key = load_pem_private_key(key_pem, password=None)
    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())


class TlsMaterial:
    def __init__(self, directory: Path, ca: Any, ca_file: Path, broker_keystore: Path,
                 client: ClientCertificate, truststore_p12: Path) -> None:
        self.directory = directory
        self._ca = ca  # trustme.CA
        self.ca_file = ca_file
        self.broker_keystore = broker_keystore
        self.client = client
        self.truststore_p12 = truststore_p12

    @classmethod
    def create(cls, directory: Path | str, hosts: tuple[str, ...] = BROKER_NAMES) -> TlsMaterial:
        """A new CA, a broker certificate for `hosts` and a client certificate, in `directory`."""
        import trustme

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA(organization_name="minibroker", organization_unit_name="test CA")
        ca_file = directory / "ca.pem"
        ca_file.write_bytes(ca.cert_pem.bytes())
        leaf = ca.issue_cert(*hosts, common_name=hosts[0], organization_name="minibroker",
                             organization_unit_name="broker")
        broker_keystore = directory / "broker.pem"
        _write_private(broker_keystore, _pkcs8(leaf.private_key_pem.bytes())
                       + b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
        truststore = directory / "truststore.p12"
        truststore.write_bytes(_pkcs12_truststore(ca.cert_pem.bytes()))
        material = cls(directory, ca, ca_file, broker_keystore, None, truststore)  # type: ignore[arg-type]
        material.client = material.issue_client("client")
        material._write_properties()
        return material

    @classmethod
    def create_or_open(cls, directory: Path | str) -> TlsMaterial:
        """The material in `directory` when it is there (a broker restarted keeps its CA, so its
        clients keep working), else new material made there, for this machine's names too."""
        directory = Path(directory)
        files = [directory / name for name in ("ca.pem", "broker.pem", "client.pem", "client-cert.pem",
                                               "client-key.pem", "client.p12", "truststore.p12")]
        if all(path.is_file() for path in files):
            from cryptography import x509

            subject = x509.load_pem_x509_certificate(files[3].read_bytes()).subject.rfc4514_string()
            client = ClientCertificate(subject, files[2], files[3], files[4], files[5])
            return cls(directory, None, files[0], files[1], client, files[6])
        import socket

        names = tuple(dict.fromkeys([*BROKER_NAMES, socket.gethostname()]))
        return cls.create(directory, names)

    def client_notes(self) -> list[str]:
        """What `serve --tls-self-signed` prints: where the files are and each client's settings."""
        ca, cert, key = self.ca_file, self.client.cert, self.client.key
        return [
            f"TLS: CA {ca}; a client certificate for mTLS: {self.client.pem} (subject {self.client.subject})",
            f"  Java, kafka-*.sh: --command-config {self.directory / 'client-ssl.properties'} "
            f"(mTLS: {self.directory / 'client-mtls.properties'})",
            f"  librdkafka: security.protocol=SSL ssl.ca.location={ca} "
            f"[ssl.certificate.location={cert} ssl.key.location={key}]",
            f"  kafka-python: security_protocol='SSL', ssl_cafile='{ca}' [ssl_certfile='{cert}', ssl_keyfile='{key}']",
            f"  aiokafka: security_protocol='SSL', ssl_context=aiokafka.helpers.create_ssl_context(cafile='{ca}')",
        ]

    def issue_client(self, name: str, *, common_name: str | None = None, organization_unit: str = "clients",
                     expired: bool = False) -> ClientCertificate:
        """A client certificate signed by the CA, subject CN=<common_name or name>,OU=...,O=minibroker,
        written as <name>.pem, <name>-cert.pem, <name>-key.pem and <name>.p12; `expired`: valid
        only in the past."""
        now = datetime.datetime.now(datetime.timezone.utc)
        window = dict(not_before=now - datetime.timedelta(days=30), not_after=now - datetime.timedelta(days=1)) \
            if expired else {}
        if self._ca is None:
            raise ValueError(f"the CA of {self.directory} was made by an earlier run; its key is not kept")
        # A name in the certificate's SAN: without one trustme writes an empty SAN, which Java refuses.
        leaf = self._ca.issue_cert(f"{name}.clients.minibroker.test", common_name=common_name or name,
                                   organization_name="minibroker", organization_unit_name=organization_unit, **window)
        key = _pkcs8(leaf.private_key_pem.bytes())
        chain = b"".join(blob.bytes() for blob in leaf.cert_chain_pems)
        pem, cert, key_file, p12 = (self.directory / f"{name}{suffix}" for suffix in (".pem", "-cert.pem", "-key.pem",
                                                                                      ".p12"))
        _write_private(pem, key + chain)
        cert.write_bytes(chain)
        _write_private(key_file, key)
        _write_private(p12, _pkcs12_keystore(key, chain, name))
        from cryptography import x509

        subject = x509.load_pem_x509_certificate(chain).subject.rfc4514_string()
        return ClientCertificate(subject, pem, cert, key_file, p12)

    # ---- the broker's side --------------------------------------------------------------------------

    def broker_properties(self, listener: str = "SSL", *, client_auth: str | None = None) -> dict[str, str]:
        """The listener's ssl.* properties: its PEM keystore, the CA as truststore, and client auth."""
        prefix = f"listener.name.{listener.lower()}."
        props = {
            prefix + "ssl.keystore.type": "PEM",
            prefix + "ssl.keystore.location": str(self.broker_keystore),
            prefix + "ssl.truststore.type": "PEM",
            prefix + "ssl.truststore.location": str(self.ca_file),
        }
        if client_auth is not None:
            props[prefix + "ssl.client.auth"] = client_auth
        return props

    # ---- each client's settings ------------------------------------------------------------------

    def _protocol(self, sasl: bool) -> str:
        return "SASL_SSL" if sasl else "SSL"

    def confluent(self, *, mtls: bool = False, sasl: bool = False,
                  client: ClientCertificate | None = None) -> dict[str, str]:
        """confluent-kafka (librdkafka) settings."""
        settings = {"security.protocol": self._protocol(sasl), "ssl.ca.location": str(self.ca_file)}
        if mtls or client is not None:
            chosen = client or self.client
            settings |= {"ssl.certificate.location": str(chosen.cert), "ssl.key.location": str(chosen.key)}
        return settings

    def kafka_python(self, *, mtls: bool = False, sasl: bool = False,
                     client: ClientCertificate | None = None) -> dict[str, Any]:
        """kafka-python keyword arguments."""
        settings: dict[str, Any] = {"security_protocol": self._protocol(sasl), "ssl_cafile": str(self.ca_file)}
        if mtls or client is not None:
            chosen = client or self.client
            settings |= {"ssl_certfile": str(chosen.cert), "ssl_keyfile": str(chosen.key)}
        return settings

    def aiokafka(self, *, mtls: bool = False, sasl: bool = False,
                 client: ClientCertificate | None = None) -> dict[str, Any]:
        """aiokafka keyword arguments (it takes an ssl.SSLContext)."""
        import ssl

        context = ssl.create_default_context(cafile=str(self.ca_file))
        if mtls or client is not None:
            chosen = client or self.client
            context.load_cert_chain(str(chosen.cert), str(chosen.key))
        return {"security_protocol": self._protocol(sasl), "ssl_context": context}

    def java(self, *, mtls: bool = False, sasl: bool = False, client: ClientCertificate | None = None) -> dict[str, str]:
        """Java client properties (PEM stores, Kafka 2.7+)."""
        props = {"security.protocol": self._protocol(sasl), "ssl.truststore.type": "PEM",
                 "ssl.truststore.location": str(self.ca_file)}
        if mtls or client is not None:
            props |= {"ssl.keystore.type": "PEM", "ssl.keystore.location": str((client or self.client).pem)}
        return props

    def _write_properties(self) -> None:
        for name, props in (("client-ssl.properties", self.java()), ("client-mtls.properties", self.java(mtls=True))):
            (self.directory / name).write_text("".join(f"{k}={v}\n" for k, v in props.items()))


def _write_private(path: Path, data: bytes) -> None:
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_bytes(data)


def _pkcs12_keystore(key_pem: bytes, chain_pem: bytes, alias: str) -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, load_pem_private_key, pkcs12

    certificates = x509.load_pem_x509_certificates(chain_pem)
    key = cast(Any, load_pem_private_key(key_pem, None))  # trustme's: an EC or RSA key, which PKCS12 takes
    return pkcs12.serialize_key_and_certificates(alias.encode(), key, certificates[0],
                                                 certificates[1:] or None,
                                                 BestAvailableEncryption(STORE_PASSWORD.encode()))


def _pkcs12_truststore(ca_pem: bytes) -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, pkcs12

    ca = x509.load_pem_x509_certificate(ca_pem)
    return pkcs12.serialize_java_truststore([pkcs12.PKCS12Certificate(ca, b"ca")],
                                            BestAvailableEncryption(STORE_PASSWORD.encode()))
