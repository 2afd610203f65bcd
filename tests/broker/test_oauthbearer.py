"""SASL/OAUTHBEARER with Kafka's unsecured validator: the token checks of
OAuthBearerUnsecuredJws and OAuthBearerValidationUtils (each with Kafka's reason), the client's first
message (RFC 7628), the error challenge and the 0x01 that ends a failed exchange, the
unsecuredValidator* options read from a listener's JAAS config; then over the wire on SASL_PLAINTEXT."""

from __future__ import annotations

import base64
import json

import pytest

from minibroker.config import BrokerConfig, ConfigError
from minibroker.jaas import parse_jaas_config
from minibroker.listeners import listener_securities
from minibroker.oauthbearer import (
    InvalidToken,
    OAuthBearerFailure,
    OAuthBearerServer,
    UnsecuredValidatorOptions,
    client_initial_response,
    parse_unsecured_jws,
    unsecured_token,
)
from minibroker.testing import running_broker
from tests.support.security import PRINCIPAL_RECORDER, metadata, oauth_login
from tests.support.wire import WireClient

NOW = 1_700_000_000_000
DEFAULTS = UnsecuredValidatorOptions()


def token(header=None, claims=None, signature: str = "") -> str:
    def part(value) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    body = {"sub": "alice", "iat": NOW / 1000, "exp": NOW / 1000 + 60}
    body.update(claims or {})
    return f"{part(header or {'alg': 'none'})}.{part({k: v for k, v in body.items() if v is not None})}.{signature}"


def test_a_valid_token_names_its_principal_and_expiry():
    jws = parse_unsecured_jws(token(claims={"scope": ["a", "b"]}), DEFAULTS, NOW)
    assert (jws.principal, jws.lifetime_ms, jws.scope) == ("alice", NOW + 60_000, frozenset({"a", "b"}))
    other = UnsecuredValidatorOptions(principal_claim="client_id", scope_claim="roles", required_scope=("admin",))
    jws = parse_unsecured_jws(token(claims={"client_id": "svc", "roles": "admin"}), other, NOW)
    assert jws.principal == "svc" and jws.scope == frozenset({"admin"})


@pytest.mark.parametrize("value, reason", [
    (token().replace(".", "..", 1), "Malformed compact serialization contains '..'"),
    ("abc.def", "Unsecured JWS compact serializations must have 3 dot-separated Base64URL-encoded values"),
    (token(header={"alg": "HS256"}), "Unsecured JWS must have 'none' for an algorithm"),
    (token(header={"typ": "JWT"}), "JWS header must have an Algorithm value"),
    (token(signature="c2ln"), "Unsecured JWS must not contain a digital signature"),
    (token(claims={"exp": None}), "No expiration time in JWT"),
    (token(claims={"sub": None}), "No principal name in JWT claim: sub"),
    (token(claims={"sub": " "}), "No principal name in JWT claim: sub"),
    (token(claims={"exp": NOW / 1000 - 1}), "was on or after the Expiration Time value"),
    (token(claims={"iat": NOW / 1000 + 5}), "The Issued At value"),
    (token(claims={"iat": NOW / 1000 + 60, "exp": NOW / 1000 + 60}), "The Issued At value"),
    (token(claims={"exp": "tomorrow"}), "The 'exp' claim was not of type Number: String"),
    ("!!!.e30.", "malformed Base64 URL encoded value"),
    (base64.urlsafe_b64encode(b"[1]").decode() + ".e30.", "malformed JSON"),
])
def test_an_invalid_token_is_refused_with_kafkas_reason(value, reason):
    with pytest.raises(InvalidToken, match=reason.replace("(", r"\(").replace(")", r"\)")):
        parse_unsecured_jws(value, DEFAULTS, NOW)


def test_the_allowable_clock_skew_and_the_required_scope():
    skewed = UnsecuredValidatorOptions(allowable_clock_skew_ms=10_000)
    parse_unsecured_jws(token(claims={"iat": NOW / 1000 - 60, "exp": NOW / 1000 - 5}), skewed, NOW)  # in the skew
    with pytest.raises(InvalidToken) as info:
        parse_unsecured_jws(token(claims={"scope": "read"}), UnsecuredValidatorOptions(required_scope=("write",)), NOW)
    assert info.value.scope == "[write]"


def test_the_options_come_from_the_listeners_jaas_config():
    jaas = parse_jaas_config('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
                             'unsecuredValidatorPrincipalClaimName="client_id" unsecuredValidatorRequiredScope="a b" '
                             'unsecuredValidatorAllowableClockSkewMs="2000";')
    assert jaas is not None
    assert UnsecuredValidatorOptions.from_jaas(jaas.options) == UnsecuredValidatorOptions("client_id", "scope",
                                                                                          ("a", "b"), 2000)
    with pytest.raises(ValueError, match="Allowable clock skew millis must not be negative"):
        UnsecuredValidatorOptions.from_jaas({"unsecuredValidatorAllowableClockSkewMs": "-1"})


@pytest.mark.parametrize("text, reason", [
    ("org.Foo required a=b", "must end with ';'"),
    ("org.Foo required a=b; org.Bar required;", "more than one login module"),
    ("org.Foo mandatory;", "invalid login module control flag"),
    ('org.Foo required a="unclosed;', "not closed"),
])
def test_a_malformed_jaas_config_is_refused(text, reason):
    with pytest.raises(ValueError, match=reason):
        parse_jaas_config(text)


def test_a_bad_listener_jaas_config_names_its_key():
    props = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "OAUTHBEARER",
             "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": "x required unsecuredValidatorAllowableClockSkewMs=no;"}
    with pytest.raises(ConfigError) as info:
        listener_securities(BrokerConfig(props))
    assert info.value.key == "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config"
    props["listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config"] = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required;")
    with pytest.raises(ConfigError, match="OAUTHBEARER takes org.apache.kafka.common.security.oauthbearer"):
        listener_securities(BrokerConfig(props))


def test_the_exchange_of_a_good_token_an_error_challenge_and_a_wrong_authorization_id():
    server = OAuthBearerServer(DEFAULTS, lambda: NOW)
    assert server.evaluate(client_initial_response(token(), extensions={"traceId": "x1"})) == b""
    assert server.complete and server.authorization_id == "alice" and server.credential_expiry_ms == NOW + 60_000
    assert server.extensions == {"traceId": "x1"}
    expired = OAuthBearerServer(DEFAULTS, lambda: NOW + 61_000)
    challenge = expired.evaluate(client_initial_response(token()))
    assert json.loads(challenge) == {"status": "invalid_token"} and not expired.complete
    with pytest.raises(OAuthBearerFailure, match='{"status":"invalid_token"}'):
        expired.evaluate(b"\x01")
    scoped = OAuthBearerServer(UnsecuredValidatorOptions(required_scope=("kafka",)), lambda: NOW)
    assert json.loads(scoped.evaluate(client_initial_response(token()))) == {"status": "insufficient_scope",
                                                                             "scope": "[kafka]"}
    with pytest.raises(OAuthBearerFailure, match=r"authorization id \(bob\) that is different"):
        OAuthBearerServer(DEFAULTS, lambda: NOW).evaluate(client_initial_response(token(), "bob"))
    for garbage in (b"", b"n,,\x01\x01", b"n,,\x01auth=Basic abc\x01\x01", b"\xff\xfe", b"y,,\x01auth=Bearer x\x01\x01"):
        with pytest.raises(OAuthBearerFailure, match="invalid credentials with SASL mechanism OAUTHBEARER"):
            OAuthBearerServer(DEFAULTS, lambda: NOW).evaluate(garbage)


JAAS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredValidatorRequiredScope=\"kafka\";"


@pytest.fixture(scope="module")
def oauth_broker(tmp_path_factory):
    with running_broker(tmp_path_factory.mktemp("oauth"), sasl_users={"alice": "pw"},
                        sasl_enabled_mechanisms="PLAIN,OAUTHBEARER", authorizer_class_name=PRINCIPAL_RECORDER,
                        properties={"listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": JAAS}) as running:
        yield running


def now_ms(running) -> int:
    return running.in_broker(running.broker.clock.now_ms)


def test_an_unsecured_token_logs_in_as_its_subject(oauth_broker):
    good = unsecured_token("svc-orders", now_ms=now_ms(oauth_broker), scope=("kafka",))
    oauth_broker.broker.authorizer.clear()
    with WireClient(oauth_broker.sasl_bootstrap) as client:
        answer = oauth_login(client, good)
        assert answer.error_code == 0 and answer.session_lifetime.total_seconds() > 3000  # the token's lifetime
        metadata(client)
    assert oauth_broker.broker.authorizer.principals("SASL_PLAINTEXT") == {"User:svc-orders"}


def test_a_token_without_the_required_scope_fails_and_closes(oauth_broker):
    bad = unsecured_token("svc-orders", now_ms=now_ms(oauth_broker), scope=("other",))
    with WireClient(oauth_broker.sasl_bootstrap) as client:
        answer = oauth_login(client, bad)
        assert answer.error_code == 58
        assert json.loads(answer.error_message) == {"status": "insufficient_scope", "scope": "[kafka]"}
        assert client.is_closed_by_peer()


def test_oauthbearer_is_offered_only_where_enabled(tmp_path):
    with running_broker(tmp_path / "data", sasl_users={"alice": "pw"}) as running:
        with WireClient(running.sasl_bootstrap) as client:
            from tests.support.security import handshake

            answer = handshake(client, "OAUTHBEARER")
            assert answer.error_code == 33 and "OAUTHBEARER" not in answer.mechanisms
