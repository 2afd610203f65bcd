"""How an error below the shell is answered, in one place, for handlers and coordinators alike; and
the error that stops a broker from starting (`StartupError`).

An exception that carries its Kafka code (protocol.errors.ApiError: a topic that exists, a bad config
value, records on disk in the way, ...) is answered with that code and its message; a file-system
error (an OSError: disk full, read-only, out of descriptors) with KAFKA_STORAGE_ERROR and a one-line
message naming the file. Storage faults are logged, at most once a minute per distinct message (a
full disk fails every request until it has room again), by each broker's own `StorageErrorLog`: two
brokers in one process keep their own counts and name themselves in the line.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from minibroker.protocol.errors import ApiError, ErrorCode
from minibroker.storage.errors import StrayDataError, storage_error_message

if TYPE_CHECKING:
    from minibroker.clock import BrokerClock

__all__ = ["STORAGE_ERROR_LOG_INTERVAL_S", "StartupError", "StorageErrorLog", "error_answer"]

class StartupError(Exception):
    """The broker cannot start; the message names what failed (an address, a path, a file, a key)."""


STORAGE_ERROR_LOG_INTERVAL_S = 60.0
MAX_REMEMBERED = 1000  # distinct messages remembered before the memory starts afresh


class StorageErrorLog:
    """Logs a storage fault at most once a minute (of the broker's clock) per distinct message."""

    def __init__(self, clock: BrokerClock, log: logging.Logger | logging.LoggerAdapter) -> None:
        self.clock = clock
        self.log = log
        self._logged: dict[str, float] = {}

    def error(self, message: str) -> None:
        now = self.clock.monotonic()
        if now - self._logged.get(message, -1e9) >= STORAGE_ERROR_LOG_INTERVAL_S:
            if len(self._logged) > MAX_REMEMBERED:
                self._logged.clear()
            self._logged[message] = now
            self.log.error("%s", message)


def error_answer(storage_errors: StorageErrorLog, exc: ApiError | OSError, what: str) -> tuple[ErrorCode, str]:
    """The error code and message that answer `exc`, raised while doing `what` (for the log, e.g.
    "t-0" or "creating topic t"). See the module docstring."""
    if isinstance(exc, ApiError):
        if isinstance(exc, StrayDataError):
            storage_errors.error(f"{what}: {exc}")
        return exc.error_code, str(exc)
    message = storage_error_message(exc)
    storage_errors.error(f"{what}: {message}")
    return ErrorCode.kafka_storage_error, message
