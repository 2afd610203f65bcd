"""The data directory's `.lock`: one broker per data directory, as Kafka's LogManager.lockLogDirs.

Kafka takes a file lock on `<log.dir>/.lock` at start and holds it until the process exits; a second
broker on the same directory fails with "Failed to acquire lock on file .lock in <dir>. A Kafka
instance in another process or thread is using this directory." Here the lock is `flock` (not
POSIX `lockf`): flock locks belong to the open file, so a second broker in the same process (tests
run brokers in threads) is refused too, and the kernel drops the lock when the process dies, so a
killed broker (SIGKILL) never leaves a stale lock behind. The file's content (the holder's pid) is for
people only.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILE = ".lock"


class DataDirLockedError(OSError):
    """Another broker holds the data directory's lock."""


class DataDirLock:
    """Holds `<data_dir>/.lock` until `release` (or the process ends)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / LOCK_FILE
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = _holder(self.path)
            raise DataDirLockedError(
                f"failed to acquire the lock on {self.path}: another broker{holder} is using the "
                f"data directory {self.path.parent}"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd: int | None = fd
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # the lock is what matters; the pid is a courtesy

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None


def _holder(path: Path) -> str:
    try:
        pid = path.read_text().strip()
    except OSError:
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""
