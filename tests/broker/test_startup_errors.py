"""A broker that cannot start says what failed: the address it could not bind (Kafka's port or the
metrics port), the data dir that is not a directory, the damaged meta.properties (storage's
DamagedFileError). `running_broker()` raises that error itself, not trio's exception group;
`minibroker serve` prints it on one line and exits 1."""

from __future__ import annotations

import re
import socket
import subprocess
import sys

import pytest

from minibroker.broker import StartupError
from minibroker.config import BrokerConfig, ConfigError
from minibroker.testing import running_broker
from minibroker.storage.errors import DamagedFileError

MINIBROKER = [sys.executable, "-m", "minibroker.cli"]


@pytest.fixture
def taken_port():
    """A port some other process holds (bound and listening for the whole test)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_the_kafka_port_in_use_names_the_address(tmp_path, taken_port):
    with pytest.raises(StartupError, match=rf"failed to bind to 127\.0\.0\.1:{taken_port} \(PLAINTEXT listener\)"):
        with running_broker(tmp_path / "d", listeners=f"127.0.0.1:{taken_port}"):
            pass


def test_the_metrics_port_in_use_names_the_address(tmp_path, taken_port):
    with pytest.raises(StartupError, match=rf"127\.0\.0\.1:{taken_port} \(metrics\.listen\).*in use"):
        with running_broker(tmp_path / "d", metrics_listen=f"127.0.0.1:{taken_port}"):
            pass


def test_a_data_dir_that_is_a_file_names_the_path(tmp_path):
    path = tmp_path / "not-a-dir"
    path.write_text("x")
    with pytest.raises(StartupError, match=f"log.dirs {path} is not a directory"):
        with running_broker(path):
            pass


@pytest.mark.parametrize("content, problem", [
    (b"\xff\xfe\x00garbage", "unreadable"),
    (b"version=1\nnode.id=1\n", "holds no cluster.id"),
    (b"", "holds no cluster.id"),
])
def test_a_damaged_meta_properties_names_the_file_and_is_left_alone(tmp_path, content, problem):
    """running_broker raises storage's DamagedFileError itself, not trio's exception group."""
    data = tmp_path / "d"
    data.mkdir()
    meta = data / "meta.properties"
    meta.write_bytes(content)
    with pytest.raises(DamagedFileError, match=f"{meta}: {problem}"):
        with running_broker(data):
            pass
    assert meta.read_bytes() == content  # not replaced by a new cluster id


def test_serve_prints_one_line_naming_the_address_and_exits_1(tmp_path, taken_port):
    result = subprocess.run(
        MINIBROKER + ["serve", "--listen", f"127.0.0.1:{taken_port}", "--data-dir", str(tmp_path / "d")],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1
    # Besides INFO lines logged on the way (the descriptor limit, ...), exactly one line: the error.
    info = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO) ")
    assert [line for line in result.stderr.splitlines() if not info.match(line)] == [
        f"minibroker: Socket server failed to bind to 127.0.0.1:{taken_port} (PLAINTEXT listener): "
        "Address already in use."
    ]


@pytest.mark.parametrize("key, value, message", [
    ("quota.algorithm", "fast", "invalid value for quota.algorithm: 'fast' must be one of sampled, token_bucket"),
    ("log.retention.ms", "soon", "invalid value for log.retention.ms: value 'soon' is not a number"),
])
def test_a_bad_setting_names_the_key(key, value, message):
    """A value outside a setting's choices names the key (the choices are not all strings), and a
    log setting storage validates is reported the same way: one ConfigError for both."""
    with pytest.raises(ConfigError) as info:
        BrokerConfig({key: value})
    assert (info.value.key, str(info.value)) == (key, message)
