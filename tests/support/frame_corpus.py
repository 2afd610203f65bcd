"""The corpus of request frames real clients send (tests/data/frames/): its format, and which client
versions it must match.

scripts/capture_frames writes it, through a recording proxy in front of a broker; tests/
test_frame_corpus.py replays it. One directory per client library and version,
`tests/data/frames/<client>-<version>/`, holding

* `frames.bin`: the captured requests exactly as they crossed the wire, in capture order: each is a
  4-byte big-endian size and that many bytes (request header and body, trailing bytes included);
* `index.json`: {"client", "version", "libraries" (name -> version of everything that shaped the
  frames, e.g. librdkafka under confluent-kafka), "captured_by", "topics" ([{"name", "topic_id",
  "partitions"}]: the topics the frames name, created with the same ids before a replay, since
  Produce v13 and Fetch v13+ name topics by id), "frames" ([{"connection", "api_key",
  "api_version", "api", "size", "expects_response"}], one per frame, in order)}.
"""

from __future__ import annotations

import json
import struct
import tomllib
from pathlib import Path

from tests.support.java_client import KAFKA_CLIENTS_VERSION

ROOT = Path(__file__).resolve().parents[2]
CORPUS_DIR = ROOT / "tests" / "data" / "frames"
FRAMES_FILE, INDEX_FILE = "frames.bin", "index.json"
_SIZE = struct.Struct(">i")

# The Python client libraries, by their name in pyproject.toml's test pins.
PYTHON_CLIENTS = ("kafka-python", "confluent-kafka", "aiokafka")
JAVA_CLIENT = "kafka-clients"  # Java's, pinned by tests/support/java_client.py (scripts/fetch_java_clients)


def pinned_versions() -> dict[str, str]:
    """client -> the version the test suite pins (pyproject.toml's `==` pins; the Java jars)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = {}
    for requirement in project["optional-dependencies"]["test"]:
        name, sep, version = requirement.partition("==")
        if sep and name.strip() in PYTHON_CLIENTS:
            pins[name.strip()] = version.strip()
    pins[JAVA_CLIENT] = KAFKA_CLIENTS_VERSION
    return pins


def corpus_directory(client: str, version: str) -> Path:
    return CORPUS_DIR / f"{client}-{version}"


def write_corpus(directory: Path, index: dict, frames: list[bytes]) -> None:
    assert len(index["frames"]) == len(frames)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / FRAMES_FILE).write_bytes(b"".join(_SIZE.pack(len(f)) + f for f in frames))
    (directory / INDEX_FILE).write_text(json.dumps(index, indent=1) + "\n")


def read_corpus(directory: Path) -> tuple[dict, list[bytes]]:
    """(index, frames); a frames file that does not match its index raises ValueError."""
    index = json.loads((directory / INDEX_FILE).read_text())
    data = (directory / FRAMES_FILE).read_bytes()
    frames, position = [], 0
    while position < len(data):
        if position + 4 > len(data):
            raise ValueError(f"{directory / FRAMES_FILE}: torn size at byte {position}")
        (size,) = _SIZE.unpack_from(data, position)
        if size < 8 or position + 4 + size > len(data):
            raise ValueError(f"{directory / FRAMES_FILE}: frame of {size} bytes at byte {position} runs past the end")
        frames.append(data[position + 4 : position + 4 + size])
        position += 4 + size
    if len(frames) != len(index["frames"]):
        raise ValueError(f"{directory}: {len(frames)} frames, but the index lists {len(index['frames'])}")
    return index, frames


def captured() -> dict[str, Path]:
    """client -> its corpus directory, for every corpus present (one per client is expected)."""
    found = {}
    for directory in sorted(CORPUS_DIR.glob("*/" + INDEX_FILE)):
        index = json.loads(directory.read_text())
        found[index["client"]] = directory.parent
    return found
