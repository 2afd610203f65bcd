"""`minibroker serve` in a child process, for what an in-process broker cannot show: a real
descriptor limit (setrlimit in the child), a real kill -9, the process's own descriptor table."""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def open_files_under(directory: Path, pid: int | str = "self") -> list[str]:
    """The files under `directory` the process `pid` holds open (from /proc/<pid>/fd)."""
    found = []
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            continue
        if target.startswith(str(directory) + "/"):
            found.append(target)
    return found


class BrokerProcess:
    def __init__(self, data_dir: Path, *, nofile: int | None = None, log_level: str = "INFO",
                 overrides: dict[str, str] | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.nofile = nofile
        self.log_level = log_level
        self.overrides = overrides or {}
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}-broker.log"
        self.proc: subprocess.Popen | None = None
        self.bootstrap = ""
        self.fields: dict[str, str] = {}

    def start(self, listen: str = "127.0.0.1:0") -> str:
        """Start and wait for the ready line; the bootstrap address. `listen`: the address to bind
        (a restart on the port the broker had, as a real broker restarts: `restart()`)."""
        nofile = self.nofile

        def limit() -> None:
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        args = [sys.executable, "-m", "minibroker.cli", "serve", "--listen", listen,
                "--data-dir", str(self.data_dir), "--log-level", self.log_level]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(args, preexec_fn=limit, stdout=subprocess.PIPE, stderr=log,
                                         text=True, cwd=ROOT)
        line = self.proc.stdout.readline()
        match = re.search(r"bootstrap\.servers=(\S+)", line)
        assert match, f"the broker did not start ({line!r}):\n{self.log()}"
        self.bootstrap = match.group(1)
        # The ready line's fields (bootstrap.servers, control when control.listen is set, ...).
        self.fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        return self.bootstrap

    def log(self) -> str:
        return self.log_path.read_text()

    def open_files_under(self, directory: Path) -> list[str]:
        """The files under `directory` the broker holds open now."""
        return open_files_under(directory, self.proc.pid)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.wait(60)
        self.proc.stdout.close()
        self.proc = None

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def restart(self) -> str:
        """Start again on the address it had (its clients reconnect to the same bootstrap)."""
        return self.start(self.bootstrap)

    def __enter__(self) -> BrokerProcess:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
