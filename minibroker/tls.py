"""TLS for SSL and SASL_SSL listeners: an `ssl.SSLContext` built from Kafka's ssl.* settings, and the
principal of an SSL client (Kafka's DefaultSslEngineFactory and DefaultKafkaPrincipalBuilder).

Keystores (the listener's certificate chain and private key):
- `ssl.keystore.type=PEM` with `ssl.keystore.location` (a file holding the key and the chain; the key
  may be encrypted with `ssl.key.password`; `ssl.keystore.password` is refused with PEM, as Kafka
  refuses it), or inline with `ssl.keystore.certificate.chain` and `ssl.keystore.key`;
- `ssl.keystore.type=PKCS12` with `ssl.keystore.location` and `ssl.keystore.password`;
- `ssl.keystore.type=JKS` (Kafka's default): a file that is PKCS12 or PEM is read as such, as Java's
  keystore.type.compat reads a PKCS12 file named JKS; a real JKS file is refused with the keytool
  command that converts it.
Truststores (what client certificates are checked against) the same way: PEM (`ssl.truststore.location`
or inline `ssl.truststore.certificates`), PKCS12 or JKS; without one, the system's CAs.

`ssl.client.auth` none/requested/required is OpenSSL's CERT_NONE/CERT_OPTIONAL/CERT_REQUIRED;
`ssl.enabled.protocols` bounds the TLS versions; `ssl.cipher.suites` takes Kafka's (IANA) suite names
and hands OpenSSL its own names for them. Any file or setting that cannot be used stops the broker
with a message naming the listener and the key.

After the handshake the client's certificate subject goes through `ssl.principal.mapping.rules`
(minibroker.principal_mapping): `User:<name>`, or User:ANONYMOUS without a certificate.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import trio

from minibroker.principal_mapping import SslPrincipalMapper, subject_name
from minibroker.storage.config import ConfigError

if TYPE_CHECKING:
    from minibroker.config import BrokerConfig

__all__ = ["ANONYMOUS", "TlsListener", "openssl_cipher_name", "server_context"]

ANONYMOUS = "User:ANONYMOUS"
_JKS_MAGIC = b"\xfe\xed\xfe\xed"
_VERSIONS = {"TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
             "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
                          "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256"})
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


@dataclass
class TlsListener:
    """What one SSL or SASL_SSL listener needs: its context and how to name an SSL client."""

    name: str
    context: ssl.SSLContext
    client_auth: str  # none, requested, required
    principal_mapper: SslPrincipalMapper

    def principal(self, ssl_object: ssl.SSLObject | trio.SSLStream) -> str:
        """The principal of a connection whose handshake completed (DefaultKafkaPrincipalBuilder);
        NoMatchingRule when no rule names its certificate's subject."""
        der = ssl_object.getpeercert(binary_form=True)
        if not der:
            return ANONYMOUS
        return "User:" + self.principal_mapper.name(subject_name(der))


def _key(listener: str, name: str) -> str:
    return f"listener.name.{listener.lower()}.{name}"


class _Settings:
    """One listener's ssl.* values (listener.name.<l>.ssl.* over ssl.*), and errors naming the key."""

    def __init__(self, config: BrokerConfig, listener: str) -> None:
        self.config = config
        self.listener = listener

    def __getitem__(self, name: str):
        return self.config.listener_value(self.listener, name)

    def key_name(self, name: str) -> str:
        """The key the value came from, for messages."""
        return _key(self.listener, name) if (self.listener.lower(), name) in self.config.listener_overrides() else name

    def error(self, name: str, reason: str) -> ConfigError:
        return ConfigError(self.key_name(name), f"listener {self.listener}: {reason}")


def server_context(config: BrokerConfig, listener: str) -> TlsListener:
    """The TLS side of listener `listener` (its security protocol SSL or SASL_SSL)."""
    settings = _Settings(config, listener)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _load_keystore(context, settings)
    client_auth = settings["ssl.client.auth"]
    context.verify_mode = _CLIENT_AUTH[client_auth]
    _load_truststore(context, settings)
    _set_protocols(context, settings)
    # No TLS-level session tickets or compression surprises; the SNI a client sends is ignored.
    context.options |= ssl.OP_NO_COMPRESSION
    return TlsListener(listener, context, client_auth, settings["ssl.principal.mapping.rules"])


# ---- keystores -------------------------------------------------------------------------------------


def _read(settings: _Settings, name: str) -> bytes:
    path = Path(settings[name])
    try:
        return path.read_bytes()
    except OSError as exc:
        raise settings.error(name, f"cannot read {path}: {exc.strerror or exc}") from None


def _store_kind(settings: _Settings, type_key: str, data: bytes) -> str:
    """PEM or PKCS12: the configured type, or for JKS what the file holds."""
    kind = settings[type_key]
    if kind != "JKS":
        return kind
    if data.startswith(_JKS_MAGIC):
        location = type_key.replace(".type", ".location")
        raise settings.error(location, f"{settings[location]} is a JKS keystore, which Python cannot read; convert it "
                             "with keytool -importkeystore -srckeystore FILE -destkeystore FILE.p12 "
                             "-deststoretype PKCS12 and set " + type_key + "=PKCS12")
    return "PEM" if b"-----BEGIN" in data[:4096] else "PKCS12"


@contextmanager
def _pem_file(*chunks: bytes) -> Iterator[str]:
    """PEM text in a private temporary file (OpenSSL loads keys from files), removed after."""
    fd, path = tempfile.mkstemp(prefix="minibroker-tls-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                out.write(chunk if chunk.endswith(b"\n") else chunk + b"\n")
        yield path
    finally:
        os.unlink(path)


def _load_keystore(context: ssl.SSLContext, settings: _Settings) -> None:
    location, chain, key = settings["ssl.keystore.location"], settings["ssl.keystore.certificate.chain"], \
        settings["ssl.keystore.key"]
    key_password = settings["ssl.key.password"] or None
    if chain or key:
        if settings["ssl.keystore.type"] != "PEM":
            raise settings.error("ssl.keystore.certificate.chain", "an inline key and chain need ssl.keystore.type=PEM")
        if not (chain and key):
            raise settings.error("ssl.keystore.key", "ssl.keystore.certificate.chain and ssl.keystore.key go together")
        if location:
            raise settings.error("ssl.keystore.location", "give either a keystore file or an inline key and chain")
        with _pem_file(key.encode(), chain.encode()) as path:
            _load_pem_chain(context, settings, path, key_password, "ssl.keystore.key")
        return
    if not location:
        raise settings.error("ssl.keystore.location", "an SSL listener needs a keystore (ssl.keystore.location, or "
                             "ssl.keystore.certificate.chain and ssl.keystore.key)")
    data = _read(settings, "ssl.keystore.location")
    if _store_kind(settings, "ssl.keystore.type", data) == "PEM":
        if settings["ssl.keystore.password"]:
            raise settings.error("ssl.keystore.password", "a PEM keystore takes no store password, only "
                                 "ssl.key.password (Kafka refuses it too)")
        _load_pem_chain(context, settings, settings["ssl.keystore.location"], key_password, "ssl.keystore.location")
        return
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, pkcs12

    password = settings["ssl.keystore.password"]
    loaded = None
    for candidate in dict.fromkeys([password, key_password or password]):
        try:
            loaded = pkcs12.load_key_and_certificates(data, candidate.encode() if candidate else None)
            break
        except ValueError:
            continue
    if loaded is None:
        raise settings.error("ssl.keystore.password", f"cannot open the PKCS12 keystore {settings['ssl.keystore.location']}"
                             " (wrong password, or not a PKCS12 file)")
    private_key, certificate, extra = loaded
    if private_key is None or certificate is None:
        raise settings.error("ssl.keystore.location", f"{settings['ssl.keystore.location']} holds no private key "
                             "with its certificate")
    pem_key = private_key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    with _pem_file(pem_key, certificate.public_bytes(Encoding.PEM),
                   *(c.public_bytes(Encoding.PEM) for c in extra)) as path:
        _load_pem_chain(context, settings, path, None, "ssl.keystore.location")


def _load_pem_chain(context: ssl.SSLContext, settings: _Settings, path: str, password: str | None,
                    name: str) -> None:
    try:
        context.load_cert_chain(path, password=password or (lambda: b""))
    except ssl.SSLError as exc:
        hint = " (is ssl.key.password right?)" if "bad decrypt" in str(exc).lower() or "PEM lib" in str(exc) else ""
        raise settings.error(name, f"cannot load the certificate chain and key: {exc.reason or exc}{hint}") from None


def _load_truststore(context: ssl.SSLContext, settings: _Settings) -> None:
    location, inline = settings["ssl.truststore.location"], settings["ssl.truststore.certificates"]
    if inline:
        if settings["ssl.truststore.type"] != "PEM":
            raise settings.error("ssl.truststore.certificates", "inline certificates need ssl.truststore.type=PEM")
        _load_ca(context, settings, "ssl.truststore.certificates", inline)
        return
    if not location:
        if context.verify_mode != ssl.CERT_NONE:
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH)  # Java's cacerts, as a JVM would
        return
    data = _read(settings, "ssl.truststore.location")
    if _store_kind(settings, "ssl.truststore.type", data) == "PEM":
        _load_ca(context, settings, "ssl.truststore.location", data.decode("ascii", "replace"))
        return
    from cryptography.hazmat.primitives.serialization import Encoding, pkcs12

    password = settings["ssl.truststore.password"]
    try:
        store = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError:
        raise settings.error("ssl.truststore.password", f"cannot open the PKCS12 truststore {location} (wrong password, "
                             "or not a PKCS12 file)") from None
    certificates = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certificates.append(store.cert.certificate)
    if not certificates:
        raise settings.error("ssl.truststore.location", f"{location} holds no certificates")
    _load_ca(context, settings, "ssl.truststore.location",
             "".join(c.public_bytes(Encoding.PEM).decode() for c in certificates))


def _load_ca(context: ssl.SSLContext, settings: _Settings, name: str, pem: str) -> None:
    try:
        context.load_verify_locations(cadata=pem)
    except (ssl.SSLError, ValueError) as exc:
        raise settings.error(name, f"cannot load the trusted certificates: {exc}") from None


# ---- protocols and cipher suites ---------------------------------------------------------------


def _set_protocols(context: ssl.SSLContext, settings: _Settings) -> None:
    enabled = [_VERSIONS[name] for name in settings["ssl.enabled.protocols"]]
    if not enabled:
        raise settings.error("ssl.enabled.protocols", "names no TLS version")
    low, high = min(enabled), max(enabled)
    suites = settings["ssl.cipher.suites"]
    if suites:
        tls12 = [name for name in suites if name not in TLS13_SUITES]
        if len(tls12) == len(suites):  # no TLS 1.3 suite listed: Java then never speaks TLS 1.3
            high = min(high, ssl.TLSVersion.TLSv1_2)
        if not tls12:  # only TLS 1.3 suites: nothing for TLS 1.2
            low = max(low, ssl.TLSVersion.TLSv1_3)
        if low > high:
            raise settings.error("ssl.cipher.suites", "none of its suites belongs to a version of ssl.enabled.protocols")
        if tls12:
            names = []
            for suite in tls12:
                openssl = openssl_cipher_name(suite)
                if openssl is None or not _cipher_known(openssl):
                    raise settings.error("ssl.cipher.suites", f"{suite} is not a TLS 1.2 cipher suite this broker's "
                                         f"TLS library ({ssl.OPENSSL_VERSION}) has")
                names.append(openssl)
            context.set_ciphers(":".join(names))
    try:
        context.minimum_version = low
        context.maximum_version = high
    except ValueError as exc:
        raise settings.error("ssl.enabled.protocols", str(exc)) from None


_KEY_EXCHANGE = {"ECDHE_RSA": "ECDHE-RSA-", "ECDHE_ECDSA": "ECDHE-ECDSA-", "DHE_RSA": "DHE-RSA-",
                 "DHE_DSS": "DHE-DSS-", "RSA": "", "ECDHE_PSK": "ECDHE-PSK-", "PSK": "PSK-"}
_CIPHERS = {"AES_128_GCM": "AES128-GCM", "AES_256_GCM": "AES256-GCM", "AES_128_CBC": "AES128",
            "AES_256_CBC": "AES256", "CHACHA20_POLY1305": "CHACHA20-POLY1305", "AES_128_CCM": "AES128-CCM",
            "AES_256_CCM": "AES256-CCM", "ARIA_128_GCM": "ARIA128-GCM", "ARIA_256_GCM": "ARIA256-GCM",
            "CAMELLIA_128_CBC": "CAMELLIA128", "CAMELLIA_256_CBC": "CAMELLIA256"}


def openssl_cipher_name(iana: str) -> str | None:
    """OpenSSL's name of a TLS 1.2 suite from its IANA name (Java's), e.g.
    TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 -> ECDHE-RSA-AES128-GCM-SHA256; None when not of that form."""
    if not iana.startswith("TLS_") or "_WITH_" not in iana:
        return None
    exchange, _, rest = iana[4:].partition("_WITH_")
    prefix = _KEY_EXCHANGE.get(exchange)
    if prefix is None:
        return None
    for cipher, name in _CIPHERS.items():
        if rest == cipher or rest.startswith(cipher + "_"):
            mac = rest[len(cipher) + 1:]
            if cipher == "CHACHA20_POLY1305":
                return prefix + name if mac == "SHA256" else None
            if cipher.endswith("_CBC") and mac == "SHA":
                return prefix + name + "-SHA"
            if cipher.endswith("_CBC") and prefix == "" and mac in ("SHA256", "SHA384"):
                return f"{name}-{mac}"
            return prefix + name + (f"-{mac}" if mac else "")
    return None


def _cipher_known(name: str) -> bool:
    scratch = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        scratch.set_ciphers(name)
    except ssl.SSLError:
        return False
    return any(c["name"] == name for c in scratch.get_ciphers())
