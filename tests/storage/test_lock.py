"""One broker per data directory: the `.lock` file (Kafka's LogManager.lockLogDirs)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from minibroker.testing import running_broker
from tests.support.damage import sole_error
from minibroker.storage.lock import DataDirLock, DataDirLockedError


def test_a_second_broker_on_the_same_data_dir_is_refused_naming_the_directory(tmp_path):
    data = tmp_path / "data"
    with running_broker(data) as first:
        with pytest.raises(BaseException) as refused:
            with running_broker(data):
                pass
        error = sole_error(refused.value)
        assert isinstance(error, DataDirLockedError)
        message = str(error)
        assert str(data) in message and ".lock" in message and str(os.getpid()) in message
        # The first broker is untouched by the attempt.
        assert first.broker.lock.held
    # Released at shutdown: the same process can start a broker there again.
    with running_broker(data):
        pass


def test_the_lock_holds_against_another_process_and_dies_with_it(tmp_path):
    lock = DataDirLock(tmp_path)
    probe = (
        "import sys; from minibroker.storage.lock import DataDirLock, DataDirLockedError\n"
        "try:\n    DataDirLock(sys.argv[1])\nexcept DataDirLockedError as e:\n    print(e); sys.exit(3)\n"
    )
    refused = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True)
    assert refused.returncode == 3 and str(tmp_path) in refused.stdout
    lock.release()
    # A holder killed with SIGKILL leaves no stale lock: the kernel drops it with the process.
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from minibroker.storage.lock import DataDirLock\n"
                               "l = DataDirLock(sys.argv[1]); print('held', flush=True); time.sleep(60)",
                               str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(DataDirLockedError):
        DataDirLock(tmp_path)
    holder.kill()
    holder.wait()
    holder.stdout.close()
    DataDirLock(tmp_path).release()


def test_the_cli_refuses_a_second_broker_with_a_clear_message(tmp_path):
    data = tmp_path / "data"
    with running_broker(data):
        result = subprocess.run(
            [sys.executable, "-m", "minibroker.cli", "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data)],
            capture_output=True, text=True, timeout=60,
        )
    assert result.returncode == 1
    assert "another broker" in result.stderr and str(data) in result.stderr
    assert "Traceback" not in result.stderr
