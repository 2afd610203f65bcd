"""pytest plugin: the `minibroker` fixture yields a RunningBroker on 127.0.0.1:0 in a temp dir.

Enabled automatically when minibroker is installed (entry point `pytest11`). Use
`minibroker.bootstrap` as bootstrap.servers. The broker is imported inside the fixture so that
merely having the plugin installed costs a test run nothing.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def minibroker(tmp_path):
    from minibroker.testing import running_broker

    with running_broker(tmp_path / "minibroker-data") as running:
        yield running
