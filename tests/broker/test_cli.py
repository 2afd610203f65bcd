"""The command line as a user meets it: --help, scripts/serve with arguments passed through, a
ready line, clean shutdown on SIGTERM/SIGINT, and config errors that name the key."""

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.wire import WireClient, schema

ROOT = Path(__file__).resolve().parents[2]
MINIBROKER = [sys.executable, "-m", "minibroker.cli"]


def test_help_lists_the_commands_and_settings():
    out = subprocess.run(MINIBROKER + ["serve", "--help"], capture_output=True, text=True, check=True).stdout
    for expected in ("--listen", "--data-dir", "--config", "--override", "num.partitions",
                     "auto.create.topics.enable", "socket.request.max.bytes"):
        assert expected in out


def _start(args, env=None):
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    if not line.startswith("minibroker ready: bootstrap.servers="):
        proc.kill()
        raise AssertionError(f"no ready line: {line!r} {proc.communicate()[1]}")
    bootstrap = line.split("bootstrap.servers=")[1].split()[0]
    return proc, bootstrap


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_scripts_serve_passes_arguments_and_shuts_down_cleanly(tmp_path, signum):
    data = tmp_path / "data"
    proc, bootstrap = _start(["bash", str(ROOT / "scripts" / "serve"), "--listen", "127.0.0.1:0",
                              "--data-dir", str(data), "--override", "num.partitions=2"])
    try:
        assert bootstrap.startswith("127.0.0.1:") and not bootstrap.endswith(":0")
        with WireClient(bootstrap) as c:
            mod = __import__(schema(3, 12).__module__, fromlist=["x"])
            response = c.request(schema(3, 12)(topics=(mod.MetadataRequestTopic(topic_id=None, name="from-cli"),),
                                               allow_auto_topic_creation=True, include_topic_authorized_operations=False))
            assert len(response.topics[0].partitions) == 2
    finally:
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 0, stderr
    assert (data / "meta.properties").exists()
    assert all((d / "clean-shutdown").exists() for d in data.glob("from-cli-*"))


def test_properties_file_and_bad_value_names_the_key(tmp_path):
    config = tmp_path / "server.properties"
    config.write_text("# comment\nnum.partitions = lots\n")
    result = subprocess.run(MINIBROKER + ["serve", "--config", str(config), "--data-dir", str(tmp_path / "d")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "num.partitions" in result.stderr and "lots" in result.stderr


def test_bad_log_setting_names_the_key(tmp_path):
    result = subprocess.run(MINIBROKER + ["serve", "--data-dir", str(tmp_path / "d"), "--listen", "127.0.0.1:0",
                                          "--override", "log.retention.ms=forever"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "log.retention.ms" in result.stderr


def test_missing_config_file_is_a_clear_error(tmp_path):
    result = subprocess.run(MINIBROKER + ["serve", "--config", str(tmp_path / "nope.properties")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "nope.properties" in result.stderr


def test_bad_override_syntax_is_refused():
    result = subprocess.run(MINIBROKER + ["serve", "--override", "novalue"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "key=value" in result.stderr
