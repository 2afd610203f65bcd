"""Fuzz a live broker over its socket: every API it serves, at every version it advertises.

The broker runs as its own process (`minibroker serve`), so a crash of any kind, a native abort
included, is seen as what it is. For each (api, version) from the handler registry, Hypothesis sends
valid requests, valid requests with a length field set to an extreme or truncated or overwritten,
and random bytes (tests/support/fuzzing.py). Each must be answered (with the request's correlation id) or
cost its connection; a request the broker legitimately parks (a long-poll Fetch, a JoinGroup
waiting for its rebalance) is given up on after a moment. After each (api, version):

- a canary client on a fresh connection still gets ApiVersions and Metadata answered;
- the broker's log holds no traceback: no handler tripped over a value the schema allows (None
  in a nullable field, an empty array, a negative number) and closed the connection as a bug.

`MINIBROKER_FUZZ_PROFILE=fuzz-long` runs 2,000 examples per (api, version).
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support import fuzzing
from tests.support.fuzzing import fuzz_settings, hostile_bodies, served, served_ids
from tests.support.wire import WireClient, schema

SERVED = served()
PARKED_AFTER_S = 0.3  # no answer by then: the broker is holding the request, which is allowed


class FuzzTarget:
    def __init__(self, tmp: Path) -> None:
        self.log_path = tmp / "broker.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "minibroker.cli", "serve", "--listen", "127.0.0.1:0",
             "--data-dir", str(tmp / "data"), "--log-level", "WARNING",
             "--sasl-listen", "127.0.0.1:0", "--sasl-user", "alice:alice-secret",
             "--override", "group.min.session.timeout.ms=1", "--override", "num.partitions=2",
             "--override", "connection.failed.authentication.delay.ms=1"],
            stdout=subprocess.PIPE, stderr=self._log, text=True,
        )
        line = self.proc.stdout.readline()
        assert line.startswith("minibroker ready: bootstrap.servers="), (line, self.log_path.read_text())
        self.bootstrap = line.split("bootstrap.servers=")[1].split()[0]
        self.sasl_bootstrap = line.split("SASL_PLAINTEXT=")[1].split()[0]
        self.log_seen = 0
        self.sock: socket.socket | None = None
        self.correlation_id = 0
        self.last_response = b""  # after the correlation id
        with WireClient(self.bootstrap) as client:  # a topic the fuzz's names will hit (fuzzing.KNOWN_NAMES)
            metadata = schema(3, 4)
            topic = __import__(metadata.__module__, fromlist=["x"]).MetadataRequestTopic(name="fuzz")
            assert client.request(metadata(topics=(topic,), allow_auto_topic_creation=True)).topics[0].error_code == 0

    def connect(self, bootstrap: str | None = None) -> socket.socket:
        host, port = (bootstrap or self.bootstrap).rsplit(":", 1)
        return socket.create_connection((host, int(port)), timeout=10)

    def send(self, api_key: int, version: int, body: bytes, parked_after_s: float = PARKED_AFTER_S) -> str:
        """'answered', 'closed' or 'parked' (no answer within `parked_after_s`)."""
        if self.sock is None:
            self.sock = self.connect()
        self.correlation_id += 1
        try:
            self.sock.sendall(fuzzing.frame(api_key, version, self.correlation_id, body))
            self.sock.settimeout(parked_after_s)
            head = _recv_exact(self.sock, 8)
            self.sock.settimeout(10)
        except socket.timeout:
            self.drop()
            return "parked"
        except (ConnectionError, EOFError):
            self.drop()
            return "closed"
        size, correlation_id = struct.unpack(">ii", head)
        assert correlation_id == self.correlation_id, "a response to another request"
        self.last_response = _recv_exact(self.sock, size - 4)
        return "answered"

    def drop(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def new_log(self) -> str:
        text = self.log_path.read_text()
        new, self.log_seen = text[self.log_seen:], len(text)
        return new

    def run_then_check(self, fuzz) -> None:
        """Run a fuzz, then: the broker serves a canary client and logged no traceback."""
        try:
            fuzz()
        finally:
            self.drop()
        self.canary()
        log = self.new_log()
        assert "Traceback" not in log, log

    def canary(self) -> None:
        """A well-behaved client on a fresh connection is still served."""
        assert self.proc.poll() is None, f"the broker exited with {self.proc.returncode}"
        with WireClient(self.bootstrap, timeout=10) as client:
            versions = client.request(schema(18, 0)())
            assert versions.error_code == 0 and versions.api_keys
            metadata = client.request(schema(3, 1)(topics=None))
            assert metadata.brokers

    def stop(self) -> int:
        self.drop()
        self.proc.terminate()
        self.proc.communicate(timeout=30)
        self._log.close()
        return self.proc.returncode


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    broker = FuzzTarget(tmp_path_factory.mktemp("fuzz"))
    try:
        yield broker
    finally:
        code = broker.stop()
    assert code == 0, f"the broker did not shut down cleanly ({code}): {broker.log_path.read_text()[-3000:]}"


@pytest.mark.parametrize(("api_key", "version", "name"), SERVED, ids=served_ids())
def test_fuzz_every_api_and_version(target, api_key, version, name):
    @fuzz_settings(6)
    @given(body=hostile_bodies(api_key, version))
    def one(body):
        target.send(api_key, version, body)

    target.run_then_check(one)


def test_random_frames_of_any_api_key_and_version(target):
    """Frames whose header names any api key and version at all: unknown keys and unserved versions
    close the connection (ApiVersions answers v0 with UNSUPPORTED_VERSION), nothing worse."""

    @fuzz_settings(60)
    @given(st.integers(-(2**15), 2**15 - 1), st.integers(-(2**15), 2**15 - 1), st.binary(max_size=64))
    def one(api_key, version, body):
        if target.sock is None:
            target.sock = target.connect()
        target.correlation_id += 1
        payload = struct.pack(">hhi", api_key, version, target.correlation_id) + body
        try:
            target.sock.sendall(struct.pack(">i", len(payload)) + payload)
        except ConnectionError:
            target.drop()

    target.run_then_check(one)


@pytest.mark.parametrize(("api_key", "version", "name"), SERVED, ids=served_ids())
def test_every_nullable_field_as_null_is_answered(target, api_key, version, name):
    """Each field the schema lets be null (arrays, strings, structs, at any depth), sent null in an
    otherwise plain request: answered, and no handler trips over the None."""
    cls = fuzzing.request_class(api_key, version)
    for path in fuzzing.nullable_paths(cls):
        outcome = target.send(api_key, version, fuzzing.encode_body(fuzzing.with_null(cls, path)))
        assert outcome != "closed", f"{'.'.join(path)} = null closed the connection: {target.new_log()}"
    target.drop()
    log = target.new_log()
    assert "Traceback" not in log, log


_SCRAM_PARTS = st.sampled_from(["n", "y", "", "n=alice", "r=abc", "c=biws", "m=x", "a=alice", "=", "x"])
_TOKENS = st.binary(max_size=64) | st.builds(
    lambda parts, proof: (",".join(parts) + proof).encode(),
    st.lists(_SCRAM_PARTS, max_size=4), st.sampled_from(["", ",p=AAAA", ",p=*", "p="]),
)


def test_sasl_listener_survives_hostile_exchanges(target):
    """On the SASL listener: a handshake for any mechanism, then any tokens. Each token is answered,
    a failure with SASL_AUTHENTICATION_FAILED (then the connection closes); nothing is a bug."""
    from minibroker.sasl import ScramClient

    @fuzz_settings(60)
    @given(st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI"]), st.booleans(),
           st.lists(_TOKENS, min_size=1, max_size=3))
    def one(mechanism, valid_first, tokens):
        sock = target.connect(target.sasl_bootstrap)
        target.sock, target.correlation_id = sock, 0
        try:
            handshake = fuzzing.encode_body(schema(17, 1)(mechanism=mechanism))
            # Nothing in the SASL exchange is ever parked: wait as long as a slow machine needs.
            assert target.send(17, 1, handshake, parked_after_s=30) == "answered"
            if mechanism == "GSSAPI":
                return
            if valid_first and mechanism.startswith("SCRAM"):
                tokens = [ScramClient(mechanism, "alice", "alice-secret").first_message(), *tokens]
            for token in tokens:
                body = fuzzing.encode_body(schema(36, 2)(auth_bytes=token))
                assert target.send(36, 2, body, parked_after_s=30) == "answered", token
                error_code = struct.unpack_from(">h", target.last_response, 1)[0]  # after the header's tags
                if error_code:
                    assert error_code == 58
                    break
        finally:
            target.drop()

    target.run_then_check(one)
