"""File-system helpers every on-disk format here shares: atomic replacement, directory and file-system
syncs, removal that tolerates a file already gone.

`write_atomically` is how every small state file is written (topic files, `log-start-offset`,
producer-state snapshots, `producer-ids`, `meta.properties`, the quota and config stores): a temporary
file beside the target (`<name>.tmp`), fsynced, renamed over the target, then the directory fsynced,
so a crash leaves either the old content or the new, and a leftover `.tmp` is a write that never
reached its rename (the owners remove those when they load).
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from pathlib import Path

__all__ = ["TMP_SUFFIX", "fsync_directory", "sync_filesystem", "unlink_if_exists", "write_atomically"]

TMP_SUFFIX = ".tmp"


def write_atomically(path: Path, *chunks: bytes | bytearray | memoryview) -> None:
    """Write the chunks to `path` so that a crash leaves either the old or the new content."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for chunk in chunks:
            view = memoryview(chunk)
            while view:  # os.write may write less than asked
                view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    """Make the directory's entries (files created, renamed or removed in it) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def unlink_if_exists(path: Path) -> None:
    """Remove a file; one already gone is no error."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def sync_filesystem(directory: Path) -> bool:
    """syncfs(2) the file system holding `directory`: everything written to it is durable. False
    where that is not available, or does not report write-back errors (Linux before 5.8): the
    caller then fsyncs file by file."""
    if not sys.platform.startswith("linux") or _kernel_version() < (5, 8):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syncfs = libc.syncfs
    except (OSError, AttributeError):
        return False
    fd = os.open(directory, os.O_RDONLY)
    try:
        if syncfs(fd) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), str(directory))
    finally:
        os.close(fd)
    return True


def _kernel_version() -> tuple[int, int]:
    try:
        major, minor = platform.release().split(".")[:2]
        return int(major), int("".join(c for c in minor if c.isdigit()) or 0)
    except ValueError:
        return 0, 0
