"""The metadata log of a stopped broker's data directory, opened by a test to read or change it."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from minibroker.storage.controller import Controller


@contextlib.contextmanager
def metadata_of(data_dir: Path | str, node_id: int = 1) -> Iterator[Controller]:
    """The controller of the metadata log in `data_dir` (a broker's, stopped), closed cleanly after."""
    controller = Controller.open(Path(data_dir), node_id, 0)
    try:
        yield controller
    finally:
        controller.close(clean=True, now_ms=0)
