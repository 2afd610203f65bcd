"""The broker: state shared by all connections, and request dispatch.

`Broker.handle_frame` turns one request frame into one response frame (or None for acks=0). Errors
are split the h11 way: a peer that sends bytes we cannot parse, an API we do not have, or a version we
do not serve gets its connection closed (ProtocolError; Kafka does the same), except ApiVersions, which
always gets an answer a v0 reader can parse. A fault in our own code is logged with its traceback and
closes only that connection.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from minibroker.config import BrokerConfig
from minibroker.groups import GroupCoordinator
from minibroker.handlers import REGISTRY, Handler, load_all
from minibroker.purgatory import Purgatory
from protocol.entities import build
from protocol.messages import (
    API_VERSIONS_KEY,
    ApiSchema,
    ProtocolError,
    RequestHeader,
    UnknownApiKeyError,
    UnsupportedVersionError,
    api_schema,
    decode_request,
    encode_response,
    parse_header,
    peek_api,
)
from storage.manager import LogManager
from storage.producer_ids import ProducerIdAllocator

log = logging.getLogger(__name__)

UNSUPPORTED_VERSION = 35


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Connection:
    """What the broker knows about one client connection."""

    peer: str
    listener: str = "PLAINTEXT"
    principal: str = "User:ANONYMOUS"
    client_id: str = ""
    id: int = 0


@dataclass
class RequestContext:
    broker: Broker
    connection: Connection
    header: RequestHeader
    schema: ApiSchema
    received_at: float  # trio clock

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def client_id(self) -> str:
        return self.header.client_id or ""


@dataclass
class BrokerMetrics:
    requests: Counter = field(default_factory=Counter)  # by api name
    bytes_in: int = 0
    bytes_out: int = 0
    connections: int = 0
    connections_total: int = 0
    closed_for_protocol_errors: int = 0


def _load_or_create_meta(data_dir: Path, node_id: int, cluster_id: str) -> str:
    """Keep the cluster id stable across restarts in meta.properties, as Kafka does."""
    meta = data_dir / "meta.properties"
    props: dict[str, str] = {}
    if meta.exists():
        for line in meta.read_text().splitlines():
            if "=" in line and not line.startswith("#"):
                key, _, value = line.partition("=")
                props[key.strip()] = value.strip()
    stored = props.get("cluster.id")
    if cluster_id and stored and cluster_id != stored:
        raise ValueError(
            f"cluster.id {cluster_id!r} does not match {stored!r} stored in {meta}"
        )
    chosen = cluster_id or stored or _random_cluster_id()
    if stored != chosen or props.get("node.id") != str(node_id):
        tmp = meta.with_suffix(".tmp")
        tmp.write_text(f"version=1\ncluster.id={chosen}\nnode.id={node_id}\n")
        tmp.replace(meta)
    return chosen


def _random_cluster_id() -> str:
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id: int = config["node.id"]
        self.data_dir = config.data_dir
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.cluster_id = _load_or_create_meta(self.data_dir, self.node_id, config["cluster.id"])
        self.log_config = config.log_config
        for key in config.unknown_keys():
            log.warning("config %s was supplied but isn't a known config", key)
        self.logs = LogManager.open(self.data_dir, self.log_config, wall_clock_ms())
        self.producer_ids = ProducerIdAllocator(self.data_dir)
        self.fetch_purgatory = Purgatory("Fetch")
        self.groups = GroupCoordinator.open(config, self.logs, wall_clock_ms)
        self.metrics = BrokerMetrics()
        self.handlers: dict[int, Handler] = load_all()
        # Set once the listener is bound (port 0 picks a port).
        self.advertised_host = "127.0.0.1"
        self.advertised_port = 0
        self._next_connection_id = 0

    # ---- lifecycle -------------------------------------------------------------------------

    def set_listener(self, host: str, port: int) -> None:
        advertised = self.config["advertised.listeners"]
        if advertised:
            from minibroker.config import _host_port

            self.advertised_host, self.advertised_port = _host_port(advertised)
        else:
            self.advertised_host = host if host not in ("0.0.0.0", "::", "") else "127.0.0.1"
            self.advertised_port = port

    def new_connection(self, peer: str, listener: str = "PLAINTEXT") -> Connection:
        self._next_connection_id += 1
        self.metrics.connections += 1
        self.metrics.connections_total += 1
        return Connection(peer=peer, listener=listener, id=self._next_connection_id)

    def connection_closed(self, conn: Connection) -> None:
        self.metrics.connections -= 1

    def close(self) -> None:
        self.groups.close()
        self.logs.close(clean=True)

    async def run_background(self) -> None:
        """Retention and the time-based flush policy, on their configured intervals."""
        retention_every = self.config["log.retention.check.interval.ms"] / 1000
        flush_every = self.config["log.flush.scheduler.interval.ms"] / 1000
        next_retention = trio.current_time() + retention_every
        while True:
            await trio.sleep(flush_every)
            now_ms = wall_clock_ms()
            self.logs.maybe_flush(now_ms)
            if trio.current_time() >= next_retention:
                next_retention = trio.current_time() + retention_every
                deleted = self.logs.enforce_retention(now_ms)
                if deleted:
                    log.info("retention deleted %d segment(s)", deleted)

    # ---- dispatch --------------------------------------------------------------------------

    async def handle_frame(self, frame: bytes, conn: Connection) -> bytes | None:
        """One request in, one response frame out (None: no response, as for acks=0)."""
        self.metrics.bytes_in += len(frame) + 4
        api_key, version, correlation_id = peek_api(frame)
        handler = self.handlers.get(api_key)
        if handler is None:
            raise UnknownApiKeyError(f"unknown api key {api_key}")
        if not handler.min_version <= version <= handler.max_version:
            if api_key == API_VERSIONS_KEY:
                return self._api_versions_fallback(correlation_id)
            raise UnsupportedVersionError(
                f"{handler.name} v{version} is not supported "
                f"(v{handler.min_version}-v{handler.max_version})"
            )
        schema = api_schema(api_key, version)
        header = parse_header(frame, schema.flexible)
        request = decode_request(schema, frame, header.size)
        if header.client_id:
            conn.client_id = header.client_id
        ctx = RequestContext(self, conn, header, schema, trio.current_time())
        self.metrics.requests[handler.name] += 1
        result = await handler.handle(ctx, request)
        if result is None:
            return None
        response = encode_response(schema, correlation_id, build(schema.response, result))
        self.metrics.bytes_out += len(response)
        return response

    def _api_versions_fallback(self, correlation_id: int) -> bytes:
        """KIP-511: UNSUPPORTED_VERSION plus our ranges, in ApiVersions v0 (header v0) form."""
        schema = api_schema(API_VERSIONS_KEY, 0)
        body = {"error_code": UNSUPPORTED_VERSION, "api_keys": self.api_version_list()}
        return encode_response(schema, correlation_id, build(schema.response, body))

    def api_version_list(self) -> list[dict[str, int]]:
        return [
            {"api_key": h.api_key, "min_version": h.min_version, "max_version": h.max_version}
            for h in sorted(self.handlers.values(), key=lambda h: h.api_key)
        ]

    # ---- helpers shared by handlers ----------------------------------------------------------

    def append_checked(self, topic: str, partition: int, log, header, records, now_ms: int):
        """Append one checked batch and wake the fetches waiting on its partition."""
        result = log.append(records, now_ms)
        self.fetch_purgatory.check_and_complete((topic, partition))
        return result

    def broker_endpoint(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "broker_id": self.node_id,
            "host": self.advertised_host,
            "port": self.advertised_port,
            "rack": None,
        }


__all__ = ["Broker", "Connection", "ProtocolError", "RequestContext", "wall_clock_ms"]
