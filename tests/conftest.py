import gc
import itertools
import os

import pytest

from minibroker.testing import running_broker

_counter = itertools.count()


@pytest.fixture
def unique():
    """unique('topic') -> a name no other test uses, so tests never share state."""
    def make(prefix: str) -> str:
        return f"{prefix}-{os.getpid()}-{next(_counter)}"
    return make


@pytest.fixture
def broker(tmp_path):
    with running_broker(tmp_path / "data") as running:
        yield running


@pytest.fixture
def start_broker(tmp_path):
    """start_broker(data_dir=None, **overrides) -> context manager; for restarts on one data dir."""
    def start(data_dir=None, **overrides):
        return running_broker(data_dir or tmp_path / "data", **overrides)
    return start


def pytest_sessionfinish(session, exitstatus):
    # Client handles a failed test left behind (librdkafka's threads log their reconnect attempts)
    # are destroyed before pytest prints its closing line, so that line stays last.
    gc.collect()
