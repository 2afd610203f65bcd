"""KIP-368 over the wire: the session lifetime SaslAuthenticate answers (connections.max.reauth.ms,
per listener and mechanism, capped by an OAUTHBEARER token's expiry); a connection whose session has
expired is closed at its next request, with one log line; re-authentication on the same connection
renews the session, with the rules of Kafka's SaslServerAuthenticator (the same principal, the same
mechanism, at most once a second, nothing else meanwhile). Time is the broker's clock, moved forward
(BrokerClock.advance): no test sleeps."""

from __future__ import annotations

import logging

import pytest

from minibroker.oauthbearer import unsecured_token
from minibroker.testing import running_broker
from tests.support.security import authenticate, handshake, metadata, oauth_login, plain_login, scram_login
from tests.support.wire import WireClient

USERS = {"alice": "alice-pw", "bob": "bob-pw"}
OAUTH = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"


@pytest.fixture
def reauth_broker(tmp_path):
    with running_broker(tmp_path / "data", sasl_users=USERS, connections_max_reauth_ms=5000,
                        sasl_enabled_mechanisms="PLAIN,SCRAM-SHA-256,OAUTHBEARER",
                        properties={"listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": OAUTH,
                                    "listener.name.sasl_plaintext.scram-sha-256.connections.max.reauth.ms": "9000"}
                        ) as running:
        yield running


def advance(running, seconds: float) -> None:
    running.in_broker(running.broker.clock.advance, seconds)


def lifetime_ms(answer) -> int:
    return round(answer.session_lifetime.total_seconds() * 1000)


def test_the_session_lifetime_per_mechanism_and_token(reauth_broker):
    with WireClient(reauth_broker.sasl_bootstrap) as client:
        assert lifetime_ms(plain_login(client, "alice", "alice-pw")) == 5000
    with WireClient(reauth_broker.sasl_bootstrap) as client:  # listener.name.<l>.<mechanism>. wins
        assert lifetime_ms(scram_login(client, "SCRAM-SHA-256", "bob", "bob-pw")) == 9000
    now = reauth_broker.in_broker(reauth_broker.broker.clock.now_ms)
    with WireClient(reauth_broker.sasl_bootstrap) as client:  # a token expiring sooner caps it
        # (real time passes between making the token and its check: a few ms of its 2 s)
        assert 1900 <= lifetime_ms(oauth_login(client, unsecured_token("carol", now_ms=now, lifetime_ms=2000))) <= 2000
    with WireClient(reauth_broker.sasl_bootstrap) as client:
        assert lifetime_ms(oauth_login(client, unsecured_token("carol", now_ms=now, lifetime_ms=60_000))) == 5000


def test_without_connections_max_reauth_ms_the_session_never_expires(tmp_path):
    with running_broker(tmp_path / "data", sasl_users=USERS) as running:
        with WireClient(running.sasl_bootstrap) as client:
            assert lifetime_ms(plain_login(client, "alice", "alice-pw")) == 0
            advance(running, 500)  # (under connections.max.idle.ms, which would close it)
            assert metadata(client).cluster_id
            assert handshake(client, "PLAIN").error_code == 34  # nothing to re-authenticate (KafkaApis)


def test_an_expired_session_is_closed_at_its_next_request(reauth_broker, caplog):
    with WireClient(reauth_broker.sasl_bootstrap) as client:
        plain_login(client, "alice", "alice-pw")
        advance(reauth_broker, 4.5)
        assert metadata(client).cluster_id  # still within its 5 s
        with caplog.at_level(logging.INFO, logger="minibroker.broker"):
            advance(reauth_broker, 1)
            with pytest.raises(ConnectionError):
                metadata(client)
    lines = [r.getMessage() for r in caplog.records if "SASL session expired" in r.getMessage()]
    assert len(lines) == 1 and "User:alice" in lines[0]
    assert reauth_broker.broker.metrics.expired_sessions_closed == 1


def test_reauthentication_renews_the_session_on_the_same_connection(reauth_broker):
    with WireClient(reauth_broker.sasl_bootstrap) as client:
        plain_login(client, "alice", "alice-pw")
        for _ in range(3):
            advance(reauth_broker, 4)
            answer = plain_login(client, "alice", "alice-pw")
            assert answer.error_code == 0 and lifetime_ms(answer) == 5000
            assert metadata(client).cluster_id
        advance(reauth_broker, 6)  # expired: a handshake still starts a re-authentication
        assert plain_login(client, "alice", "alice-pw").error_code == 0
        assert metadata(client).cluster_id
    assert reauth_broker.broker.metrics.successful_reauthentications == 4
    from minibroker.metrics_http import render

    assert "minibroker_sasl_reauthentications_total 4" in reauth_broker.in_broker(render, reauth_broker.broker)


def test_reauthentication_keeps_the_principal(reauth_broker):
    with WireClient(reauth_broker.sasl_bootstrap) as client:
        plain_login(client, "alice", "alice-pw")
        advance(reauth_broker, 2)
        answer = plain_login(client, "bob", "bob-pw")
        assert answer.error_code == 58
        assert answer.error_message == "Cannot change principals during re-authentication from User.alice: User.bob"
        assert client.is_closed_by_peer()


def test_reauthentication_keeps_the_mechanism(reauth_broker):
    with WireClient(reauth_broker.sasl_bootstrap) as client:
        plain_login(client, "alice", "alice-pw")
        advance(reauth_broker, 2)
        assert handshake(client, "SCRAM-SHA-256").error_code == 0  # answered; the exchange is refused
        with pytest.raises(ConnectionError):
            authenticate(client, b"n,,n=alice,r=abc")


def test_at_most_once_a_second_and_nothing_else_meanwhile(reauth_broker):
    with WireClient(reauth_broker.sasl_bootstrap) as client:
        plain_login(client, "alice", "alice-pw")
        assert plain_login(client, "alice", "alice-pw").error_code == 0  # at once after the first: allowed
        assert handshake(client, "PLAIN").error_code == 34  # a second within the second: KafkaApis' answer
        advance(reauth_broker, 1)
        assert handshake(client, "PLAIN").error_code == 0
        with pytest.raises(ConnectionError):  # only SaslAuthenticate until it completes
            metadata(client)


def test_sasl_ssl_authenticates_inside_tls(tmp_path):
    import ssl

    with running_broker(tmp_path / "data", sasl_users=USERS, tls=True, connections_max_reauth_ms=5000) as running:
        context = ssl.create_default_context(cafile=str(running.tls.ca_file))
        with WireClient(running.sasl_ssl_bootstrap, ssl_context=context) as client:
            with pytest.raises(ConnectionError):  # SASL_SSL: nothing before the SASL exchange either
                metadata(client)
        with WireClient(running.sasl_ssl_bootstrap, ssl_context=context) as client:
            assert scram_login(client, "SCRAM-SHA-256", "alice", "alice-pw").error_code == 0
            advance(running, 3)
            assert scram_login(client, "SCRAM-SHA-256", "alice", "alice-pw").error_code == 0  # re-authenticated
            assert metadata(client).cluster_id
