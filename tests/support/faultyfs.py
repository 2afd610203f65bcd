"""A fake file system for storage-fault tests: the `os` module as the storage layer sees it, with
chosen calls failing the way a full disk (ENOSPC), a read-only data directory (EROFS), a
permission change (EACCES) or running out of file descriptors (EMFILE) makes them fail.

`install(monkeypatch)` puts one `FaultyOs` in place of `os` in every storage module (the storage
layer's boundary with the operating system); everything not told to fail goes to the real `os`, so
the files on disk are real. Those conditions cannot be produced portably for real in a test (root
ignores permissions; filling a disk or a descriptor table disturbs everything else on the machine),
which is why this shim exists; tests that can use the real condition do.
"""

from __future__ import annotations

import errno
import os

STORAGE_MODULES = ("minibroker.storage.segment", "minibroker.storage.batch_scan", "minibroker.storage.index", "minibroker.storage.log", "minibroker.storage.log_dir",
                   "minibroker.storage.files", "minibroker.storage.retention", "minibroker.storage.manager", "minibroker.storage.producer_state.snapshot",
                   "minibroker.storage.file_cache")


class FaultyOs:
    def __init__(self) -> None:
        self._failing: dict[str, tuple[int, object]] = {}
        self.partial_writes = False  # a failing writev first writes part of its data, as a real one can
        self.calls_failed = 0

    def fail(self, name: str, code: int = errno.ENOSPC, when=None) -> None:
        """Make os.<name> raise OSError(code); `when(*args)` narrows it to some calls."""
        self._failing[name] = (code, when)

    def heal(self) -> None:
        self._failing.clear()

    def __getattr__(self, name: str):
        real = getattr(os, name)
        if name not in self._failing:
            return real
        code, when = self._failing[name]

        def failing(*args, **kwargs):
            if when is not None and not when(*args):
                return real(*args, **kwargs)
            self.calls_failed += 1
            if name == "writev" and self.partial_writes:
                first = bytes(args[1][0])
                os.write(args[0], first[: max(1, len(first) // 2)])
            raise OSError(code, os.strerror(code), *(args[:1] if isinstance(args[0], (str, os.PathLike)) else ()))
        return failing


def install(monkeypatch) -> FaultyOs:
    import importlib

    fake = FaultyOs()
    for module in STORAGE_MODULES:
        monkeypatch.setattr(importlib.import_module(module), "os", fake)
    return fake


def is_index_fd(fd: int) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}").endswith(("index", ".timeindex"))
    except OSError:
        return False
