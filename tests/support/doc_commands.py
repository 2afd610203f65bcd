"""Run a documentation page's commands as written: its fenced blocks in order, as a reader would.

- ```python title="NAME"```: the file NAME is written into the working directory;
- ```sh```: each line is a command, run with bash in the working directory; it must exit 0. A
  `minibroker serve` line is started in the background and waited for (its ready line), and stopped
  with SIGINT (Ctrl-C) once the page is done; it must then exit 0. A `pip install` line is checked,
  not run: it must install the package under test (`/path/to/minibroker`: tests/packaging builds
  and installs it) or a package the environment already has;
- ```text```: what the previous command printed, line for line (trailing spaces aside; a topic id
  is the reader's own).

`port` (None: as written) moves 127.0.0.1:9092 to another port where the page cannot be given its
own network namespace. Run as a script: `python doc_commands.py PAGE WORKDIR [PORT]`.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

FENCE = re.compile(r"^```(\w+)?(?:\s+title=\"([^\"]+)\")?\s*$")
WRITTEN_ADDRESS = "127.0.0.1:9092"


@dataclass
class Block:
    lang: str
    title: str | None
    text: str


def blocks(markdown: str) -> list[Block]:
    """The page's fenced code blocks, in order."""
    out: list[Block] = []
    lines = iter(markdown.splitlines())
    for line in lines:
        match = FENCE.match(line)
        if not match:
            continue
        body = []
        for inner in lines:
            if inner.startswith("```"):
                break
            body.append(inner)
        out.append(Block(match.group(1) or "", match.group(2), "\n".join(body) + "\n"))
    return out


def _normalize(text: str) -> list[str]:
    text = re.sub(r"TopicId: \S+", "TopicId: <id>", text)
    return [line.rstrip() for line in text.strip("\n").splitlines()]


def _pip_install_is_known(line: str) -> None:
    for requirement in line.split()[2:]:
        if requirement.startswith("-") or requirement == "/path/to/minibroker":
            continue
        metadata.distribution(requirement.strip("\"'"))  # PackageNotFoundError: the page names an unknown one


def _wait_ready(proc: subprocess.Popen, timeout: float = 60) -> str:
    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    if not selector.select(timeout):
        raise AssertionError(f"no ready line in {timeout} s")
    return proc.stdout.readline()


def run_page(page: Path, workdir: Path, port: int | None = None) -> list[str]:
    """Run the page's commands in `workdir`; the commands run, in order. Raises AssertionError."""
    def moved(text: str) -> str:
        return text if port is None else text.replace(WRITTEN_ADDRESS, f"127.0.0.1:{port}")

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    ran: list[str] = []
    servers: list[subprocess.Popen] = []
    last_output: str | None = None
    try:
        for block in blocks(page.read_text()):
            if block.lang == "python" and block.title:
                (workdir / block.title).write_text(moved(block.text))
            elif block.lang == "sh":
                for line in block.text.splitlines():
                    command = line.split("#", 1)[0].strip() if not line.lstrip().startswith("pip") else line.strip()
                    if not command:
                        continue
                    ran.append(command)
                    if command.startswith("pip install"):
                        _pip_install_is_known(command)
                        last_output = None
                    elif command.startswith("minibroker serve"):
                        extra = f" --listen 127.0.0.1:{port}" if port is not None else ""
                        proc = subprocess.Popen(["bash", "-c", "exec " + command + extra], cwd=workdir, env=env,
                                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                        servers.append(proc)
                        last_output = _wait_ready(proc)
                    else:
                        result = subprocess.run(["bash", "-c", moved(command)], cwd=workdir, env=env,
                                                capture_output=True, text=True, timeout=300)
                        if result.returncode != 0:
                            raise AssertionError(f"`{command}` exited {result.returncode}:\n{result.stdout}\n"
                                                 f"{result.stderr}")
                        last_output = result.stdout
            elif block.lang == "text" and last_output is not None:
                expected, got = _normalize(moved(block.text)), _normalize(last_output)
                if expected != got:
                    raise AssertionError(f"`{ran[-1]}` printed\n{last_output}\nbut the page shows\n{block.text}")
                last_output = None
    finally:
        for proc in servers:
            proc.send_signal(signal.SIGINT)  # Ctrl-C
            try:
                _, stderr = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise AssertionError("minibroker serve did not stop on Ctrl-C") from None
            if proc.returncode != 0:
                raise AssertionError(f"minibroker serve exited {proc.returncode} on Ctrl-C: {stderr[-2000:]}")
    return ran


if __name__ == "__main__":
    done = run_page(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else None)
    print("\n".join(done))
