"""pytest plugin: the `minibroker` fixture yields a RunningBroker on 127.0.0.1:0 in a temp dir.

Enabled automatically when minibroker is installed (entry point `pytest11`). Use
`minibroker.bootstrap` as bootstrap.servers.
"""

from __future__ import annotations

import pytest

from minibroker.testing import running_broker


@pytest.fixture
def minibroker(tmp_path):
    with running_broker(tmp_path / "minibroker-data") as running:
        yield running
