"""SASL on the broker: the SCRAM and PLAIN servers against the RFC test vectors and a client
implementation, then the SASL_PLAINTEXT listener over the wire: what is allowed before
authentication, failures that answer SASL_AUTHENTICATION_FAILED and close, and endpoints advertised
per listener."""

from __future__ import annotations

import base64

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.broker import Broker
from minibroker.config import BrokerConfig, ConfigError
from minibroker.sasl import (
    PlainServer,
    SaslAuthenticationFailed,
    SaslSession,
    ScramClient,
    ScramCredential,
    ScramServer,
    UserStore,
)
from minibroker.protocol.entities import build
from tests.support.wire import WireClient, schema
from tests.support.clock import run

# ---- SCRAM (RFC 5802 / RFC 7677) ----------------------------------------------------------------

RFC7677 = {
    "user": "user",
    "password": "pencil",
    "client_nonce": "rOprNGfwEbeRWgbNEkqO",
    "server_nonce": "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    "salt": "W22ZaJ0SNY7soEsUEjb6gQ==",
    "client_first": b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
    "server_first": b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
    "client_final": b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    "server_final": b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
}


def rfc_server() -> ScramServer:
    credential = ScramCredential.derive("SCRAM-SHA-256", RFC7677["password"], base64.b64decode(RFC7677["salt"]))
    return ScramServer("SCRAM-SHA-256", {"user": credential}.get, nonce=lambda: RFC7677["server_nonce"])


def test_scram_sha_256_server_reproduces_the_rfc_7677_exchange():
    server = rfc_server()
    assert server.evaluate(RFC7677["client_first"]) == RFC7677["server_first"]
    assert server.evaluate(RFC7677["client_final"]) == RFC7677["server_final"]
    assert server.complete and server.authorization_id == "user"


def test_scram_client_reproduces_the_rfc_7677_exchange():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC7677["client_nonce"])
    assert client.first_message() == RFC7677["client_first"]
    assert client.final_message(RFC7677["server_first"]) == RFC7677["client_final"]
    client.verify_server_final(RFC7677["server_final"])


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("user", ["alice", "a,b=c"])  # ',' and '=' travel escaped (=2C, =3D)
def test_scram_round_trip_with_random_salt_and_nonces(mechanism, user):
    users = UserStore({user: "secret"}, (mechanism,))
    server = users.new_server(mechanism)
    client = ScramClient(mechanism, user, "secret")
    server_first = server.evaluate(client.first_message())
    client.verify_server_final(server.evaluate(client.final_message(server_first)))
    assert server.complete and server.authorization_id == user


GENERIC = "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"


@pytest.mark.parametrize("password, user", [("wrong", "alice"), ("secret", "mallory")])
def test_scram_wrong_password_and_unknown_user_fail_alike(password, user):
    """Kafka tells an unauthenticated client nothing about which part was wrong."""
    server = UserStore({"alice": "secret"}, ("SCRAM-SHA-256",)).new_server("SCRAM-SHA-256")
    client = ScramClient("SCRAM-SHA-256", user, password)
    with pytest.raises(SaslAuthenticationFailed, match=GENERIC):
        server.evaluate(client.final_message(server.evaluate(client.first_message())))


@pytest.mark.parametrize("client_first", [
    b"p=tls-unique,,n=user,r=abc",  # channel binding needs TLS
    b"n,,m=ext,n=user,r=abc",  # a mandatory extension
    b"n,,n=us=er,r=abc",  # a bad saslname escape
    b"garbage",
    b"\xff\xfe",
])
def test_scram_refuses_malformed_client_first_messages(client_first):
    with pytest.raises(SaslAuthenticationFailed):
        rfc_server().evaluate(client_first)


def test_scram_refuses_a_changed_nonce_or_channel_binding():
    for final in (RFC7677["client_final"].replace(b"r=rOpr", b"r=XOpr"),
                  RFC7677["client_final"].replace(b"c=biws", b"c=eSws")):
        server = rfc_server()
        server.evaluate(RFC7677["client_first"])
        with pytest.raises(SaslAuthenticationFailed):
            server.evaluate(final)


@pytest.mark.parametrize("client_first", [
    b"n,,r=abc",  # no n=
    b"n,,n=user",  # no r=
    b"n,,n=user,r=",  # an empty nonce
    b"n,",
    b"n,,",
    b"n,,n",
    b",,,",
])
def test_scram_client_first_missing_what_it_must_have_fails_as_authentication(client_first):
    with pytest.raises(SaslAuthenticationFailed, match=GENERIC):
        rfc_server().evaluate(client_first)


NONCE = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"


@pytest.mark.parametrize("client_final", [
    NONCE + b",p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",  # no c=
    b"c=biws,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",  # no r=
    b"c=biws," + NONCE,  # no p=
    b"c=biws," + NONCE + b",p=not*base64",
    b"c=!!!," + NONCE + b",p=AAAA",
    b"c=biws," + NONCE + b",p=AAAA",  # a proof of the wrong length
    b",p=",
    b"p=",
    b"\xff,p=AA==",
])
def test_scram_client_final_missing_what_it_must_have_fails_as_authentication(client_final):
    server = rfc_server()
    server.evaluate(RFC7677["client_first"])
    with pytest.raises(SaslAuthenticationFailed, match=GENERIC):
        server.evaluate(client_final)


# SCRAM-shaped garbage: attributes from the RFC, present or not, in any order, well formed or not.
_ATTRIBUTES = st.sampled_from([
    "n", "y", "p=tls", "", "a=user", "n=user", "n=us=er", "r=", "r=rOprNGfwEbeRWgbNEkqO",
    NONCE.decode(), "c=biws", "c=!!", "p=AAAA", "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
    "m=x", "s=QQ==", "i=4096", "=", "x",
])
_SCRAM_TOKENS = st.binary(max_size=80) | st.lists(_ATTRIBUTES, max_size=6).map(lambda a: ",".join(a).encode())


@settings(max_examples=300, deadline=None)
@given(_SCRAM_TOKENS, _SCRAM_TOKENS)
def test_scram_server_fails_any_garbage_only_as_authentication(first, final):
    """Whatever a client sends at either step, the server answers or fails authentication."""
    for server, tokens in ((rfc_server(), [first, final]), (rfc_server(), [RFC7677["client_first"], final])):
        for token in tokens:
            try:
                server.evaluate(token)
            except SaslAuthenticationFailed:
                break


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=60) | st.lists(st.text(max_size=8), max_size=4).map(lambda p: "\0".join(p).encode()))
def test_plain_server_fails_any_garbage_only_as_authentication(token):
    try:
        PlainServer(UserStore({"alice": "secret"}, ("PLAIN",))).evaluate(token)
    except SaslAuthenticationFailed:
        pass


def test_scram_authzid_must_be_the_user():
    server = rfc_server()
    with pytest.raises(SaslAuthenticationFailed, match="authorization id that is different"):
        server.evaluate(b"n,a=admin,n=user,r=abc")


# ---- PLAIN ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("token, message", [
    (b"\0alice\0secret", None),
    (b"alice\0alice\0secret", None),
    (b"\0alice\0wrong", "Invalid username or password"),
    (b"\0bob\0secret", "Invalid username or password"),
    (b"admin\0alice\0secret", "authorization id that is different"),
    (b"\0\0secret", "username not specified"),
    (b"\0alice\0", "password not specified"),
    (b"alice:secret", "invalid credentials with SASL mechanism PLAIN"),
])
def test_plain_server(token, message):
    server = PlainServer(UserStore({"alice": "secret"}, ("PLAIN",)))
    if message is None:
        assert server.evaluate(token) == b"" and server.authorization_id == "alice"
    else:
        with pytest.raises(SaslAuthenticationFailed, match=message):
            server.evaluate(token)


def test_a_failed_session_is_not_complete_and_has_no_user():
    session = SaslSession("PLAIN", PlainServer(UserStore({"alice": "secret"}, ("PLAIN",))))
    with pytest.raises(SaslAuthenticationFailed):
        session.evaluate(b"\0alice\0nope")
    assert not session.complete and session.user is None


# ---- configuration -------------------------------------------------------------------------------


def test_listeners_and_users_config():
    config = BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:9092, SASL_PLAINTEXT://0.0.0.0:9093",
                           "sasl.users": "alice:a:b,bob:pw"})
    assert [(li.name, li.host, li.port) for li in config["listeners"]] == [
        ("PLAINTEXT", "127.0.0.1", 9092), ("SASL_PLAINTEXT", "0.0.0.0", 9093)]
    assert config["sasl.users"] == {"alice": "a:b", "bob": "pw"}
    assert [(li.name, li.port) for li in BrokerConfig({"listeners": "127.0.0.1:1"})["listeners"]] == [("PLAINTEXT", 1)]


@pytest.mark.parametrize("props, key", [
    ({"listeners": "FOO://127.0.0.1:9092"}, "listener.security.protocol.map"),
    ({"listeners": "NOT-A-NAME://127.0.0.1:9092"}, "listeners"),
    ({"advertised.listeners": "SSL://h:1"}, "advertised.listeners"),
    ({"listeners": "PLAINTEXT://a:1,PLAINTEXT://a:2"}, "listeners"),
    ({"listeners": ""}, "listeners"),
    ({"sasl.users": "alice"}, "sasl.users"),
    ({"sasl.enabled.mechanisms": "GSSAPI"}, "sasl.enabled.mechanisms"),
])
def test_bad_sasl_and_listener_config_names_the_key(props, key):
    with pytest.raises(ConfigError) as info:
        BrokerConfig(props)
    assert info.value.key == key


# ---- the SASL listener over the wire -------------------------------------------------------------


@pytest.fixture
def sasl_broker(start_broker):
    with start_broker(sasl_users={"alice": "alice-pw", "bob": "bob-pw"}) as running:
        yield running


def handshake(client, mechanism):
    return client.request(schema(17, 1)(mechanism=mechanism))


def authenticate(client, token, version=2):
    return client.request(schema(36, version)(auth_bytes=token))


def metadata(client, version=12):
    return client.request(build(schema(3, version), {
        "topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}))


def test_plain_over_the_wire_then_every_api(sasl_broker):
    with WireClient(sasl_broker.sasl_bootstrap) as c:
        assert c.request(schema(18, 3)(client_software_name="t", client_software_version="1")).error_code == 0
        answer = handshake(c, "PLAIN")
        assert answer.error_code == 0 and set(answer.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        result = authenticate(c, b"\0alice\0alice-pw")
        assert result.error_code == 0 and result.error_message is None
        assert metadata(c).cluster_id
        # A second exchange after authentication is refused without closing (KafkaApis).
        assert handshake(c, "PLAIN").error_code == 34
        assert authenticate(c, b"x").error_code == 34


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_over_the_wire(sasl_broker, mechanism):
    with WireClient(sasl_broker.sasl_bootstrap) as c:
        assert handshake(c, mechanism).error_code == 0
        client = ScramClient(mechanism, "bob", "bob-pw")
        first = authenticate(c, client.first_message(), version=1)
        final = authenticate(c, client.final_message(bytes(first.auth_bytes)), version=1)
        assert final.error_code == 0
        client.verify_server_final(bytes(final.auth_bytes))
        assert metadata(c).cluster_id


def test_wrong_password_answers_58_then_closes_and_others_carry_on(sasl_broker):
    with WireClient(sasl_broker.sasl_bootstrap) as c:
        handshake(c, "PLAIN")
        result = authenticate(c, b"\0alice\0nope")
        assert result.error_code == 58
        assert result.error_message == "Authentication failed: Invalid username or password"
        assert c.is_closed_by_peer()
    with WireClient(sasl_broker.sasl_bootstrap) as c:
        handshake(c, "PLAIN")
        assert authenticate(c, b"\0alice\0alice-pw").error_code == 0


def test_nothing_but_the_sasl_exchange_before_authentication(sasl_broker):
    with WireClient(sasl_broker.sasl_bootstrap) as c:
        with pytest.raises(ConnectionError):
            metadata(c)
    with WireClient(sasl_broker.sasl_bootstrap) as c:  # SaslAuthenticate before SaslHandshake
        with pytest.raises(ConnectionError):
            authenticate(c, b"\0alice\0alice-pw")
    with WireClient(sasl_broker.sasl_bootstrap) as c:  # anything but SaslAuthenticate after it
        handshake(c, "PLAIN")
        with pytest.raises(ConnectionError):
            metadata(c)


@pytest.mark.parametrize("client_final", [b"r=x,p=AAAA", b"c=biws,p=AAAA", b"garbage"])
def test_malformed_scram_answers_58_then_closes(sasl_broker, client_final):
    with WireClient(sasl_broker.sasl_bootstrap) as c:
        handshake(c, "SCRAM-SHA-256")
        client = ScramClient("SCRAM-SHA-256", "alice", "alice-pw")
        assert authenticate(c, client.first_message()).error_code == 0
        result = authenticate(c, client_final)
        assert (result.error_code, result.error_message) == (58, GENERIC)
        assert c.is_closed_by_peer()
    # Answered as a failed authentication, not dropped as a bug or a protocol error.
    assert sasl_broker.in_broker(lambda: sasl_broker.broker.metrics.closed_for_protocol_errors) == 0
    with WireClient(sasl_broker.sasl_bootstrap) as c:  # the broker carries on
        assert handshake(c, "SCRAM-SHA-256").error_code == 0


def test_a_malformed_scram_message_waits_out_the_failed_authentication_delay(tmp_path):
    """On trio's MockClock: the answer to a malformed client-first comes after
    connection.failed.authentication.delay.ms of (virtual) time, then the connection closes."""
    from minibroker.server import serve_connection
    from tests.support.wire import encode_request

    config = BrokerConfig({"log.dirs": str(tmp_path / "d"), "sasl.users": "alice:pw",
                           "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                           "connection.failed.authentication.delay.ms": "250"})
    broker = Broker(config)

    async def main():
        client, server = trio.testing.memory_stream_pair()
        conn = broker.new_connection("mem", "SASL_PLAINTEXT")

        async def serve():
            async with server:  # closed when the loop returns, as server._connection_task does
                await serve_connection(broker, server, conn)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve)
            await client.send_all(encode_request(schema(17, 1)(mechanism="SCRAM-SHA-256"), 1))
            await client.receive_some(1 << 16)
            start = trio.current_time()
            await client.send_all(encode_request(schema(36, 2)(auth_bytes=b"n,,r=no-user"), 2))
            answer = await client.receive_some(1 << 16)
            assert trio.current_time() - start == pytest.approx(0.25)
            assert b"SCRAM-SHA-256" in answer  # the generic failure message
            assert await client.receive_some(1) == b""  # closed

    run(main)
    broker.close()


def test_unsupported_mechanism_answers_33_with_the_list_then_closes(sasl_broker):
    with WireClient(sasl_broker.sasl_bootstrap) as c:
        answer = handshake(c, "GSSAPI")
        assert answer.error_code == 33 and "PLAIN" in answer.mechanisms
        assert c.is_closed_by_peer()


def test_sasl_requests_on_the_plaintext_listener_are_illegal_state(sasl_broker):
    with WireClient(sasl_broker.bootstrap) as c:
        assert handshake(c, "PLAIN").error_code == 34
        assert authenticate(c, b"\0alice\0alice-pw").error_code == 34
        assert metadata(c).cluster_id


def test_each_listener_advertises_itself(sasl_broker):
    """Metadata, FindCoordinator and DescribeCluster name the endpoint the client connected to."""
    for bootstrap, authenticate_first in ((sasl_broker.bootstrap, False), (sasl_broker.sasl_bootstrap, True)):
        port = int(bootstrap.rsplit(":", 1)[1])
        with WireClient(bootstrap) as c:
            if authenticate_first:
                handshake(c, "PLAIN")
                authenticate(c, b"\0bob\0bob-pw")
            assert [b.port for b in metadata(c).brokers] == [port]
            found = c.request(build(schema(10, 3), {"key": "g", "key_type": 0}))
            assert found.port == port
            cluster = c.request(build(schema(60, 0), {"include_cluster_authorized_operations": False}))
            assert [b.port for b in cluster.brokers] == [port]
    assert sasl_broker.broker.listeners["PLAINTEXT"][1] == int(sasl_broker.bootstrap.rsplit(":", 1)[1])


def test_saslhandshake_v0_is_not_offered(sasl_broker):
    with WireClient(sasl_broker.sasl_bootstrap) as c:
        versions = {k.api_key: (k.min_version, k.max_version) for k in c.request(schema(18, 0)()).api_keys}
    assert versions[17] == (1, 1) and versions[36] == (0, 2)
