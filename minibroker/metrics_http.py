"""GET /metrics: the broker's metrics in Prometheus text format (version 0.0.4), over plain HTTP/1.1.

Served when `metrics.listen` (or `--metrics-listen HOST:PORT`) is set. One request per connection
(`Connection: close`), which is all a scraper needs; no dependencies beyond trio.

Series:

- Client quotas, per live quota sensor, labelled by its metric tags (`user`, `client_id`; empty when
  the quota level does not use one), Kafka's groups and names: `kafka_server_produce_byte_rate`,
  `kafka_server_fetch_byte_rate`, `kafka_server_request_request_time` (percent of one thread) and
  `kafka_server_{produce,fetch,request}_throttle_time` (average ms; NaN when nothing was throttled in
  the last 60 s, as Kafka reports it). Sensors exist only once a quota of their type is configured.
  With `quota.algorithm=token_bucket`, also `kafka_server_{produce,fetch,request}_tokens`.
- Controller mutations (KIP-599), per live quota sensor once a controller_mutation_rate is set:
  `kafka_server_controllermutation_mutation_rate` (partitions created or deleted per second),
  `_tokens` (the bucket's balance; below 0 the client is throttled) and `_throttle_time`.
- Connection creation (KIP-612), Kafka's socket-server-metrics: `kafka_network_socket_server_metrics_`
  `broker_connection_accept_rate`, `connection_accept_rate{listener}` and `{ip}` (IPs with a
  connection_creation_rate), `connection_accept_throttle_time{listener}` and
  `ip_connection_accept_throttle_time{listener}`; counters `minibroker_connection_accept_delays_total`
  and `minibroker_connections_refused_for_ip_rate_total` per listener.
- Producer-id quota (KIP-936), per tracked user: `kafka_server_producer_ids_rate` (new producer ids
  admitted in the last `producer.id.quota.window.size.seconds`: the unit of `producer_ids_rate`),
  `_tokens` (new ids the user may still introduce now; 0 while throttled), `_throttle_time`,
  `_false_positives` (Bloom claims without producer state; charged as new), `_known_from_state`,
  `_estimated_fpp`, `_memory_bytes` (the user's Bloom layers); broker-wide counters
  `minibroker_producer_id_quota_{admitted,rejected,false_positives,known_from_state}_total`, and
  `minibroker_producer_state_entries`.
- Producer state: `minibroker_producer_state_bytes` (its memory, sys.getsizeof over the state's
  objects, about 135 B per entry in lean mode and 1,380 B in kafka mode; computed per scrape by
  walking every entry: 0.2 us (lean) to 5 us (kafka) each).
- Transactions: `minibroker_transactional_ids{state=...}` (the coordinator's transactional ids by
  Kafka's state name: Ongoing, PrepareCommit, CompleteAbort, ...),
  `minibroker_transactions_timed_out_total` (aborted by the coordinator past their timeout).
- The broker: `minibroker_requests_total{api=...}`, `minibroker_requests_by_version_total{api=...,version=...}`, `minibroker_bytes_in_total`,
  `minibroker_bytes_out_total`, `minibroker_connections`, `minibroker_connections_total`,
  `minibroker_connections_closed_for_protocol_errors_total`,
  `minibroker_requests_with_trailing_bytes_total` (bytes after a well-formed body, ignored as Kafka
  ignores them).
- Limits (minibroker.limits): `minibroker_connections_closed_idle_total` (connections.max.idle.ms),
  `minibroker_connections_rejected_total` (max.connections.per.ip),
  `minibroker_connection_accept_waits_total` (max.connections), `minibroker_connections_max` (the
  limit in force: max.connections or the connections' share of the descriptor budget),
  `minibroker_request_memory_bytes`
  and `minibroker_request_memory_waits_total` (queued.max.request.bytes). Frames over
  sasl.server.max.receive.size count in `minibroker_connections_closed_for_protocol_errors_total`.
- Open files (log.max.open.files, docs/storage.md): `minibroker_open_segment_files`, `minibroker_open_segment_files_max`
  (log.max.open.files), `minibroker_segment_file_opens_total`,
  `minibroker_segment_file_evictions_total`, `minibroker_file_descriptor_limit`.
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from typing import TYPE_CHECKING, Iterable

import trio

from minibroker.descriptors import open_files_limit
from minibroker.listen import bind

if TYPE_CHECKING:
    from minibroker.broker import Broker

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_MAX_REQUEST_HEAD = 16384

_TAG_LABELS = {"user": "user", "client-id": "client_id"}
_HELP = {
    "byte_rate": "bytes per second over the quota window",
    "request_time": "request handling time as a percentage of one thread",
    "throttle_time": "average throttle time in ms over the last 60 s (NaN: none)",
    "tokens": "tokens left in the quota's bucket (below 0: throttled)",
    "mutation_rate": "partitions created or deleted per second over the quota window (KIP-599)",
}

_CONNECTION_HELP = {
    "broker-connection-accept-rate": "connections accepted per second, all listeners (max.connection.creation.rate)",
    "connection-accept-rate": "connections accepted per second, per listener or per IP with a connection_creation_rate",
    "connection-accept-throttle-time": "average ms the acceptor waited for a connection-creation rate (NaN: none in 60 s)",
    "ip-connection-accept-throttle-time": "average ms a connection over its IP's connection_creation_rate was held "
                                          "before being closed (NaN: none in 60 s)",
}


_PID_HELP = {
    "rate": "new producer ids admitted in the last producer.id.quota.window.size.seconds",
    "tokens": "new producer ids the user may still introduce now (0: throttled)",
    "throttle-time": "average throttle time in ms over the last window (NaN: none)",
    "false-positives": "Bloom filter claims without producer state, charged as new",
    "known-from-state": "ids the filter did not hold but producer state did (not charged)",
    "estimated-fpp": "estimated false-positive probability of the user's Bloom layers",
    "memory-bytes": "bytes of the user's Bloom layers",
}


_NOT_NAME = re.compile(r"[^a-zA-Z0-9_]")


def _client_metrics(out: _Families, broker: Broker) -> None:
    """What clients pushed (KIP-714, minibroker.telemetry): `minibroker_client_<their metric name>`
    with their client id and instance id as labels (and each point's attributes). Monotonic sums
    are counters (`_total`); everything else gauges."""
    instances = broker.client_metrics.instances
    for instance in sorted(instances.values(), key=lambda i: str(i.instance_id)):
        if instance.terminating:  # its last push is in; kept only to refuse what comes after
            continue
        base = {"client_id": instance.selectors.get("client_id", ""), "client_instance_id": str(instance.instance_id)}
        for (name, kind, attributes), value in sorted(instance.values.items()):
            family = "minibroker_client_" + _NOT_NAME.sub("_", name)
            if kind == "counter" and not family.endswith("_total"):
                family += "_total"
            labels = dict(base)
            for key, text in attributes:
                label = _NOT_NAME.sub("_", key)
                if label not in ("client_id", "client_instance_id") and not label.startswith("__"):
                    labels[label if not label[:1].isdigit() else "_" + label] = text
            out.add(family, kind, f"{name}, pushed by the client (KIP-714)", labels, value)


def _metric_name(*parts: str) -> str:
    return "_".join(p.lower().replace("-", "_").replace(".", "_") for p in parts)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


class _Families:
    """Samples grouped by metric name, so each family is written once with its TYPE line."""

    def __init__(self) -> None:
        self._families: dict[str, tuple[str, str, list[str]]] = {}

    def add(self, name: str, kind: str, help_text: str, labels: dict[str, str], value: float) -> None:
        family = self._families.setdefault(name, (kind, help_text, []))
        family[2].append(f"{name}{_labels(labels)} {_number(value)}")

    def lines(self) -> Iterable[str]:
        for name, (kind, help_text, samples) in self._families.items():
            yield f"# HELP {name} {help_text}"
            yield f"# TYPE {name} {kind}"
            yield from samples


def render(broker: Broker) -> str:
    """The whole exposition text, at the broker clock's time."""
    out = _Families()
    quotas = broker.quotas
    for manager in quotas.managers:
        for group, name, tags, value in manager.metrics_snapshot(broker.clock.monotonic_ms()):
            metric = _metric_name("kafka_server", group, name)
            labels = {_TAG_LABELS.get(k, _metric_name(k)): v for k, v in sorted(tags.items(), key=_tag_order)}
            out.add(metric, "gauge", f"{group} {_HELP.get(_metric_name(name), name)}", labels, value)
    rates = quotas.connection_rates
    for name, tags, value in rates.metrics_snapshot(broker.clock.monotonic_ms()):
        out.add(_metric_name("kafka_network_socket_server_metrics", name), "gauge",
                f"KIP-612 {_CONNECTION_HELP[name]}", tags, value)
    for listener, (delays, refused) in rates.totals().items():
        out.add("minibroker_connection_accept_delays_total", "counter",
                "times the acceptor waited for max.connection.creation.rate", {"listener": listener}, delays)
        out.add("minibroker_connections_refused_for_ip_rate_total", "counter",
                "connections closed for their IP's connection_creation_rate", {"listener": listener}, refused)
    for user, name, value in quotas.pid.metrics(broker.clock.now_ms()):  # wall clock, see BrokerQuotas
        out.add(_metric_name("kafka_server_producer_ids", name), "gauge",
                f"ProducerIds {_PID_HELP.get(name, name)} (KIP-936)", {"user": user}, value)
    for name, value in quotas.pid.totals().items():
        out.add(_metric_name("minibroker_producer_id_quota", name, "total"), "counter",
                f"producer-id quota: new producer ids {name.replace('-', ' ')} since start", {}, value)
    out.add("minibroker_producer_state_entries", "gauge",
            "producer ids held in the producer state of loaded partitions", {}, broker.producer_states.entry_count)
    out.add("minibroker_producer_state_bytes", "gauge",
            f"bytes the producer state of loaded partitions occupies ({broker.producer_states.mode} mode)", {},
            broker.producer_states.memory_bytes())
    m = broker.metrics
    for api, count in sorted(m.requests.items()):
        out.add("minibroker_requests_total", "counter", "requests handled, by API", {"api": api}, count)
    _client_metrics(out, broker)
    for (api, version), count in sorted(m.request_versions.items()):
        out.add("minibroker_requests_by_version_total", "counter",
                "requests handled, by API and version (Kafka's RequestsPerSec{request,version})",
                {"api": api, "version": str(version)}, count)
    states = Counter(txn.state.kafka_name for txn in broker.transactions.txns.values())
    for state, count in sorted(states.items()):
        out.add("minibroker_transactional_ids", "gauge", "transactional ids the coordinator knows, by state",
                {"state": state}, count)
    out.add("minibroker_transactions_timed_out_total", "counter",
            "transactions aborted by the coordinator because they outlived their transaction.timeout.ms", {},
            broker.transactions.timed_out_aborts)
    out.add("minibroker_bytes_in_total", "counter", "request bytes received", {}, m.bytes_in)
    out.add("minibroker_bytes_out_total", "counter", "response bytes sent", {}, m.bytes_out)
    out.add("minibroker_connections", "gauge", "open client connections", {}, m.connections)
    out.add("minibroker_connections_total", "counter", "client connections accepted", {}, m.connections_total)
    out.add("minibroker_connections_closed_for_protocol_errors_total", "counter",
            "connections closed because the peer sent bad bytes", {}, m.closed_for_protocol_errors)
    out.add("minibroker_requests_with_trailing_bytes_total", "counter",
            "requests with bytes after the fields of their body (ignored, as Kafka does)", {},
            m.requests_with_trailing_bytes)
    connections, memory = broker.connection_quotas, broker.request_memory
    out.add("minibroker_connections_max", "gauge",
            "connections accepted at most at once: max.connections or the connections' share of the "
            "descriptor budget, whichever is less", {}, connections.max_connections)
    out.add("minibroker_connections_closed_idle_total", "counter",
            "connections closed after connections.max.idle.ms without a completed request", {}, m.closed_idle)
    out.add("minibroker_tls_handshake_failures_total", "counter",
            "TLS connections closed at their handshake (bad bytes, a refused or missing certificate, no "
            "handshake within connections.max.idle.ms)", {}, m.failed_tls_handshakes)
    out.add("minibroker_sasl_expired_sessions_closed_total", "counter",
            "connections closed at a request after their SASL session expired (KIP-368; Kafka's "
            "expired-connections-killed-count)", {}, m.expired_sessions_closed)
    out.add("minibroker_sasl_reauthentications_total", "counter",
            "SASL sessions renewed by re-authentication on their connection (KIP-368)", {},
            m.successful_reauthentications)
    out.add("minibroker_connections_rejected_total", "counter",
            "connections closed on accept because their address was at max.connections.per.ip", {},
            connections.rejected_per_ip)
    out.add("minibroker_connection_accept_waits_total", "counter",
            "times the broker stopped accepting at max.connections until a connection closed", {},
            connections.accept_waits)
    out.add("minibroker_request_memory_bytes", "gauge",
            "bytes of requests read and not yet handled (bounded by queued.max.request.bytes)", {}, memory.used)
    out.add("minibroker_request_memory_waits_total", "counter",
            "times a connection waited for queued.max.request.bytes to read its next request", {}, memory.waits)
    cleaner = broker.cleaner.metrics
    out.add("minibroker_log_cleaner_runs_total", "counter", "log cleaner rounds completed", {}, cleaner.runs)
    out.add("minibroker_log_cleaner_bytes_read_total", "counter", "bytes of segments the log cleaner read", {},
            cleaner.bytes_read)
    out.add("minibroker_log_cleaner_bytes_written_total", "counter", "bytes of cleaned segments the log cleaner wrote",
            {}, cleaner.bytes_written)
    out.add("minibroker_log_cleaner_records_removed_total", "counter",
            "records the log cleaner removed (superseded values, expired tombstones)", {}, cleaner.records_removed)
    out.add("minibroker_log_cleaner_failures_total", "counter", "log cleaner rounds that failed", {}, cleaner.failures)
    out.add("minibroker_log_cleaner_in_progress", "gauge", "1 while the log cleaner is cleaning a log", {},
            int(cleaner.in_progress))
    out.add("kafka_log_log_cleaner_manager_max_dirty_percent", "gauge",
            "LogCleanerManager max-dirty-percent: the dirty ratio of the dirtiest compacted log, in percent", {},
            cleaner.max_dirty_percent)
    out.add("kafka_log_log_cleaner_max_clean_time_secs", "gauge", "LogCleaner max-clean-time-secs: the longest round",
            {}, cleaner.max_clean_seconds)
    out.add("kafka_log_log_cleaner_max_buffer_utilization_percent", "gauge",
            "LogCleaner max-buffer-utilization-percent: how full the last round's key map got", {},
            100 * cleaner.max_buffer_utilization)
    out.add("kafka_log_log_cleaner_manager_uncleanable_partitions_count", "gauge",
            "LogCleanerManager uncleanable-partitions-count: partitions skipped after damaged data", {},
            len(broker.cleaner.uncleanable))
    files = broker.files
    out.add("minibroker_open_segment_files", "gauge", "segment files open now", {}, len(files))
    out.add("minibroker_open_segment_files_max", "gauge", "segment files kept open at most (log.max.open.files)",
            {}, files.capacity)
    out.add("minibroker_segment_file_opens_total", "counter", "segment files opened (a reopen after an eviction counts)",
            {}, files.opens)
    out.add("minibroker_segment_file_evictions_total", "counter",
            "segment files closed to stay under log.max.open.files or the descriptor budget", {}, files.evictions)
    out.add("minibroker_file_descriptor_limit", "gauge", "the process's soft descriptor limit (RLIMIT_NOFILE)",
            {}, open_files_limit())
    return "\n".join(out.lines()) + "\n"


def _tag_order(item: tuple[str, str]) -> tuple[int, str]:
    return (0 if item[0] == "user" else 1 if item[0] == "client-id" else 2, item[0])


async def _read_head(stream: trio.abc.Stream) -> bytes | None:
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        if len(buffer) > _MAX_REQUEST_HEAD:
            return None
        data = await stream.receive_some(4096)
        if not data:
            return None
        buffer += data
    return buffer.split(b"\r\n\r\n", 1)[0]


def _http_response(status: str, body: bytes, content_type: str = "text/plain; charset=utf-8",
                   head_only: bool = False) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    return head if head_only else head + body


async def handle_http(broker: Broker, stream: trio.abc.Stream) -> None:
    async with stream:
        try:
            with broker.clock.move_on_after(10):
                head = await _read_head(stream)
                if head is None:
                    return
                request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
                parts = request_line.split()
                if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                    await stream.send_all(_http_response("400 Bad Request", b"bad request\n"))
                    return
                method, target, _ = parts
                path = target.split("?", 1)[0]
                if method not in ("GET", "HEAD"):
                    await stream.send_all(_http_response("405 Method Not Allowed", b"GET only\n"))
                elif path != "/metrics":
                    await stream.send_all(_http_response("404 Not Found", b"try /metrics\n"))
                else:
                    body = render(broker).encode()
                    await stream.send_all(_http_response("200 OK", body, CONTENT_TYPE, method == "HEAD"))
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            pass
        except Exception:
            log.exception("bug while serving /metrics")


async def serve_metrics(broker: Broker, host: str, port: int, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve GET /metrics until cancelled; reports the bound (host, port)."""
    listeners = await bind(host, port, "metrics.listen")
    bound_host, bound_port = listeners[0].socket.getsockname()[:2]
    if bound_host in ("0.0.0.0", "::"):
        bound_host = "127.0.0.1"
    log.info("metrics on http://%s:%d/metrics", bound_host, bound_port)

    async def handler(stream: trio.SocketStream) -> None:
        await handle_http(broker, stream)

    task_status.started((bound_host, bound_port))
    await trio.serve_listeners(handler, listeners)
