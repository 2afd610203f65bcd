"""`scripts/spark_standalone`: a Spark standalone cluster (one master, one worker) on 127.0.0.1, from
the installed pyspark, for `scripts/pipeline --master spark://...`.

The pip package of pyspark ships Spark's `sbin/spark-daemon.sh` (what Spark's start-master.sh and
start-worker.sh run) but not those two wrappers; this does what they do: `spark-daemon.sh start
org.apache.spark.deploy.master.Master 1 --host 127.0.0.1 ...`, then the Worker pointed at it. Ports
are picked by the system (port 0, read back from the master's log), so several developers' clusters
and a broker on 9092 never collide. Logs, PID files and the worker's scratch space go to one state
directory (default `.spark-standalone/` in the repository); `stop` stops exactly the daemons whose PID
files are there.

    scripts/spark_standalone start [--cores 2] [--memory 2g]   # prints spark://127.0.0.1:PORT
    scripts/spark_standalone status
    scripts/spark_standalone stop
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIR = ROOT / ".spark-standalone"
MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"
IDENT = "minibroker"

__all__ = ["master_url", "start", "status", "stop"]


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _env(state: Path) -> dict[str, str]:
    return {
        **os.environ,
        "SPARK_HOME": str(_spark_home()),
        "SPARK_LOG_DIR": str(state / "logs"),
        "SPARK_PID_DIR": str(state / "pids"),
        "SPARK_WORKER_DIR": str(state / "work"),
        "SPARK_IDENT_STRING": IDENT,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }


def _daemon(state: Path, action: str, command: str, *args: str) -> subprocess.CompletedProcess:
    script = _spark_home() / "sbin" / "spark-daemon.sh"
    return subprocess.run(["bash", str(script), action, command, "1", *args], env=_env(state),
                          capture_output=True, text=True, timeout=120)


def _log(state: Path, command: str) -> str:
    names = glob.glob(str(state / "logs" / f"spark-{IDENT}-{command}-1-*.out"))
    if not names:
        return ""
    return Path(max(names, key=os.path.getmtime)).read_text(errors="replace")


def _wait_for(state: Path, command: str, pattern: str, timeout_s: float) -> re.Match:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        match = re.search(pattern, _log(state, command))
        if match:
            return match
        time.sleep(0.3)
    tail = "\n".join(_log(state, command).splitlines()[-20:])
    raise RuntimeError(f"the Spark {command.rsplit('.', 1)[-1]} did not start within {timeout_s:.0f} s; its log "
                       f"({state / 'logs'}) ends with:\n{tail}")


def master_url(state: Path = DEFAULT_DIR) -> str | None:
    path = state / "master-url"
    return path.read_text().strip() if path.is_file() else None


def status(state: Path = DEFAULT_DIR) -> dict[str, bool]:
    out = {}
    for command in (MASTER, WORKER):
        result = _daemon(state, "status", command)
        out[command.rsplit(".", 1)[-1]] = result.returncode == 0
    return out


def start(state: Path = DEFAULT_DIR, cores: int = 2, memory: str = "2g", timeout_s: float = 180.0) -> str:
    """Start the master and one worker (if not already running); returns the master URL."""
    state = Path(state).resolve()
    running = master_url(state)
    if running and all(status(state).values()):
        return running
    for sub in ("logs", "pids", "work"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    for name in glob.glob(str(state / "logs" / "*.out")):  # a fresh start reads fresh logs
        os.remove(name)
    result = _daemon(state, "start", MASTER, "--host", "127.0.0.1", "--port", "0", "--webui-port", "0")
    if result.returncode != 0:
        raise RuntimeError(f"spark-daemon.sh could not start the master: {result.stdout}{result.stderr}")
    url = _wait_for(state, MASTER, r"Starting Spark master at (spark://\S+)", timeout_s).group(1)
    result = _daemon(state, "start", WORKER, "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
                     "--cores", str(cores), "--memory", memory, url)
    if result.returncode != 0:
        stop(state)
        raise RuntimeError(f"spark-daemon.sh could not start the worker: {result.stdout}{result.stderr}")
    try:
        _wait_for(state, WORKER, r"Successfully registered with master", timeout_s)
    except RuntimeError:
        stop(state)
        raise
    (state / "master-url").write_text(url + "\n")
    return url


def stop(state: Path = DEFAULT_DIR) -> None:
    """Stop the worker and the master started in `state` (by their PID files)."""
    state = Path(state).resolve()
    for command in (WORKER, MASTER):
        _daemon(state, "stop", command)
    (state / "master-url").unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/spark_standalone", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("start", "stop", "status"))
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"state directory (default {DEFAULT_DIR})")
    parser.add_argument("--cores", type=int, default=2, help="the worker's cores (default 2)")
    parser.add_argument("--memory", default="2g", help="the worker's memory (default 2g)")
    args = parser.parse_args(argv)
    if args.action == "start":
        try:
            print(start(args.dir, args.cores, args.memory))
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
            return 1
    elif args.action == "stop":
        stop(args.dir)
    else:
        states = status(args.dir)
        for name, up in states.items():
            print(f"{name}: {'running' if up else 'not running'}")
        url = master_url(args.dir)
        if url and all(states.values()):
            print(url)
        return 0 if all(states.values()) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
