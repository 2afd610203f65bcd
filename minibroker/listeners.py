"""What each listener asks of its clients: its security protocol, its TLS context, its SASL mechanisms
and their settings (Kafka's ChannelBuilders: one channel builder per listener, configured with the
listener's `listener.name.<l>.` values over the broker's).

    PLAINTEXT        nothing: every connection is User:ANONYMOUS
    SSL              TLS (minibroker.tls); the principal is the client certificate's subject through
                     ssl.principal.mapping.rules, or User:ANONYMOUS without one
    SASL_PLAINTEXT   SASL (minibroker.sasl): PLAIN, SCRAM-SHA-256/512, OAUTHBEARER
    SASL_SSL         TLS, then SASL; the principal is SASL's

Per listener and mechanism (Kafka's saslMechanismConfigPrefix): the JAAS options of
`listener.name.<l>.<mechanism>.sasl.jaas.config` (PLAIN's `user_<name>` users, OAUTHBEARER's
`unsecuredValidator*`) and `connections.max.reauth.ms` (KIP-368). Built once at start: a keystore or
option that cannot be used stops the broker with a message naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping

from minibroker.config import OAUTHBEARER_UNSECURED_VALIDATOR
from minibroker.oauthbearer import OAuthBearerServer, UnsecuredValidatorOptions
from minibroker.sasl import PlainServer, ScramServer
from minibroker.storage.config import ConfigError

if TYPE_CHECKING:
    from minibroker.config import BrokerConfig
    from minibroker.sasl import UserStore
    from minibroker.tls import TlsListener

__all__ = ["ListenerSecurity", "listener_securities", "unbound_listener"]

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


@dataclass
class ListenerSecurity:
    name: str
    protocol: str  # PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
    tls: TlsListener | None = None
    mechanisms: tuple[str, ...] = ()  # SASL listeners: the enabled mechanisms, in order
    reauth_ms: dict[str, int] = field(default_factory=dict)  # mechanism -> connections.max.reauth.ms
    plain_users: dict[str, str] = field(default_factory=dict)  # PLAIN's JAAS users (user_NAME)
    oauth: UnsecuredValidatorOptions = field(default_factory=UnsecuredValidatorOptions)

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def new_sasl_server(self, mechanism: str, users: UserStore,
                        now_ms: Callable[[], int]) -> PlainServer | ScramServer | OAuthBearerServer:
        """The server side of one exchange of `mechanism` (enabled on this listener)."""
        if mechanism == "OAUTHBEARER":
            return OAuthBearerServer(self.oauth, now_ms)
        if mechanism == "PLAIN":
            return PlainServer(users, self.plain_users)
        return ScramServer(mechanism, lambda user: users.scram_credential(mechanism, user))


def listener_securities(config: BrokerConfig) -> dict[str, ListenerSecurity]:
    """Every listener's security, by name (ConfigError naming the key at fault)."""
    return {entry.name: _listener(config, entry.name) for entry in config["listeners"]}


def unbound_listener(config: BrokerConfig, name: str) -> ListenerSecurity:
    """The security of a listener name that `listeners` does not have: a connection a test hands the
    broker directly. Its protocol is the name's, if it is one (PLAINTEXT otherwise), without TLS."""
    protocol = name if name in ("PLAINTEXT", "SASL_PLAINTEXT") else "PLAINTEXT"
    security = ListenerSecurity(name, protocol)
    if security.sasl:
        security.mechanisms = config["sasl.enabled.mechanisms"]
        security.reauth_ms = {m: config["connections.max.reauth.ms"] for m in security.mechanisms}
    return security


def _listener(config: BrokerConfig, name: str) -> ListenerSecurity:
    protocol = config.listener_protocol(name)
    security = ListenerSecurity(name, protocol)
    if protocol in ("SSL", "SASL_SSL"):
        from minibroker.tls import server_context

        security.tls = server_context(config, name)
    if not security.sasl:
        return security
    mechanisms = config.listener_value(name, "sasl.enabled.mechanisms")
    if not mechanisms:
        raise ConfigError(f"listener.name.{name.lower()}.sasl.enabled.mechanisms",
                          f"the {protocol} listener {name} has no SASL mechanism enabled")
    security.mechanisms = mechanisms
    for mechanism in mechanisms:
        security.reauth_ms[mechanism] = config.mechanism_value(name, mechanism, "connections.max.reauth.ms")
        jaas = config.mechanism_value(name, mechanism, "sasl.jaas.config")
        if jaas is not None:
            _check_module(name, mechanism, jaas.login_module)
        if mechanism == "PLAIN" and jaas is not None:
            security.plain_users = jaas.plain_users()
        if mechanism == "OAUTHBEARER":
            handler = config.mechanism_value(name, mechanism, "sasl.server.callback.handler.class", "")
            if handler not in ("", OAUTHBEARER_UNSECURED_VALIDATOR):
                raise ConfigError(_mechanism_key(name, mechanism, "sasl.server.callback.handler.class"),
                                  "only Kafka's unsecured validator is served")
            try:
                security.oauth = UnsecuredValidatorOptions.from_jaas(jaas.options if jaas else {})
            except ValueError as exc:
                raise ConfigError(_mechanism_key(name, mechanism, "sasl.jaas.config"), str(exc)) from None
    return security


_MODULES: Mapping[str, str] = {"PLAIN": PLAIN_LOGIN_MODULE, "SCRAM-SHA-256": SCRAM_LOGIN_MODULE,
                               "SCRAM-SHA-512": SCRAM_LOGIN_MODULE, "OAUTHBEARER": OAUTHBEARER_LOGIN_MODULE}


def _check_module(listener: str, mechanism: str, module: str) -> None:
    if module != _MODULES[mechanism]:
        raise ConfigError(_mechanism_key(listener, mechanism, "sasl.jaas.config"),
                          f"{mechanism} takes {_MODULES[mechanism]}, not {module}")


def _mechanism_key(listener: str, mechanism: str, name: str) -> str:
    return f"listener.name.{listener.lower()}.{mechanism.lower()}.{name}"
