"""Broker configuration: Kafka's config names, Kafka-style properties files, clear errors.

Every key the broker reads is declared once in BROKER_CONFIGS with its type, default and a line of
documentation; `minibroker serve --help` prints the table. Log settings (log.segment.bytes,
log.retention.ms, ...) are validated by storage's LogConfig, which owns their meaning. An unknown key is
logged and kept (Kafka does the same: "was supplied but isn't a known config"); a bad value stops the
broker with a message naming the key and the reason.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from minibroker.storage.config import BROKER_LOG_KEYS, ConfigError, LogConfig

log = logging.getLogger(__name__)


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError(f"expected true or false, got {value!r}")


def _int(value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise ValueError(f"expected an integer, got {value!r}") from None


def _float(value: str) -> float:
    try:
        return float(value.strip())
    except ValueError:
        raise ValueError(f"expected a number, got {value!r}") from None


def _str(value: str) -> str:
    return value.strip()


def _host_port(value: str) -> tuple[str, int]:
    value = value.strip()
    if "://" in value:  # PLAINTEXT://127.0.0.1:9092, Kafka's listener form
        value = value.split("://", 1)[1]
    host, sep, port = value.rpartition(":")
    if not sep:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    port_number = _int(port)
    if not 0 <= port_number <= 65535:
        raise ValueError(f"port {port_number} is out of range")
    return host.strip("[]") or "0.0.0.0", port_number


def _control_address(value: str) -> tuple[str, int] | None:
    """control.listen: HOST:PORT, :PORT or PORT (those two on 127.0.0.1: loopback unless it names
    another address); empty: off."""
    value = value.strip()
    if not value:
        return None
    host, sep, port = value.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return (host.strip("[]") if sep and host else "127.0.0.1"), int(port)


def _fault_rules(value: str):
    from minibroker.faults import parse_rules

    return parse_rules(value)


# Settings of a custom quota callback (client.quota.callback.class) live under this prefix.
CALLBACK_CONFIG_PREFIX = "client.quota.callback."

# Per-listener settings: listener.name.<listener, lower case>.<key> (Kafka's ListenerName.configPrefix),
# and per listener and SASL mechanism: listener.name.<listener>.<mechanism, lower case>.<key>
# (Kafka's ListenerName.saslMechanismConfigPrefix).
LISTENER_CONFIG_PREFIX = "listener.name."
SSL_KEYS = (
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.type", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.truststore.certificates", "ssl.client.auth", "ssl.protocol",
    "ssl.enabled.protocols", "ssl.cipher.suites", "ssl.endpoint.identification.algorithm",
    "ssl.principal.mapping.rules", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
)
LISTENER_KEYS = ("max.connection.creation.rate", "sasl.enabled.mechanisms", "connections.max.reauth.ms", *SSL_KEYS)
# Keys given per listener and mechanism (listener.name.sasl_ssl.oauthbearer.sasl.jaas.config); only
# connections.max.reauth.ms exists without the prefix too.
MECHANISM_KEYS = ("sasl.jaas.config", "connections.max.reauth.ms", "sasl.server.callback.handler.class")

# Kafka's SecurityProtocol names.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_LISTENER_NAME = re.compile(r"[A-Za-z0-9_]+")


@dataclass(frozen=True)
class Listener:
    """One listener: its name (a security protocol, or a name listener.security.protocol.map maps to
    one) and address."""

    name: str
    host: str
    port: int


def _listeners(value: str) -> tuple[Listener, ...]:
    """Kafka's `NAME://HOST:PORT,...` list; a bare HOST:PORT is a PLAINTEXT listener. Names are upper
    case, as Kafka's ListenerName normalises them; which security protocol a name has is
    listener.security.protocol.map's to say (BrokerConfig checks every name has one)."""
    out: list[Listener] = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        name, sep, address = item.partition("://")
        name = name.strip().upper() if sep else "PLAINTEXT"
        if not _LISTENER_NAME.fullmatch(name):
            raise ValueError(f"listener name {name!r} must be letters, digits and '_'")
        if any(existing.name == name for existing in out):
            raise ValueError(f"listener {name} is given twice")
        out.append(Listener(name, *_host_port(address if sep else item)))
    return tuple(out)


def _protocol_map(value: str) -> dict[str, str]:
    """`NAME:PROTOCOL,...` (Kafka's listener.security.protocol.map)."""
    out: dict[str, str] = {}
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not _LISTENER_NAME.fullmatch(name):
            raise ValueError(f"expected LISTENER_NAME:SECURITY_PROTOCOL, got {item!r}")
        if protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"{item!r}: the security protocol must be one of {', '.join(SECURITY_PROTOCOLS)}")
        if name in out:
            raise ValueError(f"listener {name} is mapped twice")
        out[name] = protocol
    return out


def _list(value: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in value.split(",") if item.strip())


def _protocols(value: str) -> tuple[str, ...]:
    names = _list(value)
    known = ("TLSv1.2", "TLSv1.3", "TLSv1.1", "TLSv1")
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"unknown TLS protocol(s) {', '.join(unknown)}; known: TLSv1.2, TLSv1.3")
    return names


def _super_users(value: str) -> frozenset[str]:
    """Kafka's `User:alice;User:bob` (semicolons: a principal may hold a comma)."""
    users = [item.strip() for item in value.split(";") if item.strip()]
    bad = [user for user in users if ":" not in user]
    if bad:
        raise ValueError(f"a super user is a principal, TYPE:NAME (User:alice), not {bad[0]!r}")
    return frozenset(users)


def _principal_rules(value: str):
    from minibroker.principal_mapping import SslPrincipalMapper

    return SslPrincipalMapper(value)


def _group_protocols(value: str) -> tuple[str, ...]:
    names = tuple(p.strip().lower() for p in value.split(",") if p.strip())
    unknown = [p for p in names if p not in ("classic", "consumer", "streams")]
    if unknown:
        raise ValueError(f"unsupported group protocol(s) {', '.join(unknown)}; supported: classic, consumer, streams")
    if "classic" not in names:
        raise ValueError("must include classic")
    return names


def _assignors(value: str) -> tuple[str, ...]:
    """`uniform,range`; Kafka's class names are accepted for them."""
    from minibroker.groups.assignors import ASSIGNORS, CLASS_NAMES

    names = tuple(CLASS_NAMES.get(a.strip(), a.strip()) for a in value.split(",") if a.strip())
    unknown = [a for a in names if a not in ASSIGNORS]
    if unknown:
        raise ValueError(f"unknown assignor(s) {', '.join(unknown)}; available: {', '.join(ASSIGNORS)}")
    if not names:
        raise ValueError("must name at least one assignor")
    if len(set(names)) != len(names):
        raise ValueError("names an assignor twice")
    return names


def _streams_assignors(value: str) -> tuple[str, ...]:
    """`sticky`, the one built-in task assignor of streams groups (Kafka's class name is accepted too)."""
    names = tuple("sticky" if a.strip() == "org.apache.kafka.coordinator.group.streams.assignor.StickyTaskAssignor"
                  else a.strip() for a in value.split(",") if a.strip())
    unknown = [a for a in names if a != "sticky"]
    if unknown or not names:
        raise ValueError(f"unknown streams group assignor(s) {', '.join(unknown) or '(none)'}; available: sticky")
    return names


def _share_assignors(value: str) -> tuple[str, ...]:
    """`simple`, the one server-side assignor of share groups (Kafka's class name is accepted too)."""
    names = tuple("simple" if a.strip() == "org.apache.kafka.coordinator.group.assignor.SimpleAssignor" else a.strip()
                  for a in value.split(",") if a.strip())
    unknown = [a for a in names if a != "simple"]
    if unknown or not names:
        raise ValueError(f"unknown share group assignor(s) {', '.join(unknown) or '(none)'}; available: simple")
    return names


def _non_empty(v: Any) -> str | None:
    return None if v else "must name at least one listener"


def _mechanisms(value: str) -> tuple[str, ...]:
    names = tuple(m.strip().upper() for m in value.split(",") if m.strip())
    unknown = [m for m in names if m not in SASL_MECHANISMS]
    if unknown:
        raise ValueError(f"unsupported SASL mechanism(s) {', '.join(unknown)}; supported: {', '.join(SASL_MECHANISMS)}")
    return names


def _users(value: str) -> dict[str, str]:
    """`alice:alice-secret,bob:bob-secret` (a password may contain ':' but not ',')."""
    users: dict[str, str] = {}
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        name, sep, password = item.partition(":")
        if not sep or not name.strip() or not password:
            raise ValueError(f"expected NAME:PASSWORD, got {item.split(':')[0]!r}:...")
        users[name.strip()] = password
    return users


def _optional_str(value: str) -> str | None:
    return value.strip() or None


def _optional_host_port(value: str) -> tuple[str, int] | None:
    return _host_port(value) if value.strip() else None


def _ip_overrides(value: str) -> dict[str, int]:
    """Kafka's `host:count,...`; a host name counts for each address it resolves to at start."""
    import socket

    out: dict[str, int] = {}
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host:
            raise ValueError(f"expected HOST:COUNT, got {item!r}")
        limit = _int(count)
        if limit < 0:
            raise ValueError(f"{item!r}: the count must be at least 0")
        try:
            infos = socket.getaddrinfo(host.strip("[]"), None, proto=socket.IPPROTO_TCP)
        except OSError as exc:
            raise ValueError(f"cannot resolve {host!r}: {exc}") from None
        for info in infos:
            out[str(info[4][0])] = limit
    return out


@dataclass(frozen=True)
class Key:
    name: str
    parse: Callable[[str], Any]
    default: str
    doc: str
    check: Callable[[Any], str | None] | None = None  # returns a reason when the value is bad
    sensitive: bool = False  # DescribeConfigs shows no value (passwords)


def _at_least(minimum: float) -> Callable[[Any], str | None]:
    return lambda v: None if v >= minimum else f"must be at least {minimum}"


def _one_of(*choices: Any) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"must be one of {', '.join(map(str, choices))}"


BROKER_CONFIGS: dict[str, Key] = {
    k.name: k
    for k in [
        Key("listeners", _listeners, "127.0.0.1:9092", "Where the broker listens: NAME://HOST:PORT,... with NAME a security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) or a name listener.security.protocol.map gives one (a bare HOST:PORT is PLAINTEXT; port 0 picks one).", _non_empty),
        Key("advertised.listeners", _listeners, "", "NAME://HOST:PORT,... given to clients in Metadata, per listener (a bare HOST:PORT is PLAINTEXT); defaults to the bound addresses."),
        Key("listener.security.protocol.map", _protocol_map, "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT", "The security protocol of each listener name, NAME:PROTOCOL,... (Kafka's default maps each protocol's own name to it); settings of one listener are given as listener.name.<name, lower case>.<key>."),
        Key("log.dirs", _str, "./data", "The data directory: partition logs, producer ids, metadata."),
        Key("node.id", _int, "1", "This broker's id (with several brokers, the first one's; the others count up from it). A broker alone is also the controller.", _at_least(0)),
        Key("cluster.id", _str, "", "Cluster id; generated once and kept in meta.properties when empty."),
        Key("num.partitions", _int, "1", "Partitions of an auto-created topic.", _at_least(1)),
        Key("auto.create.topics.enable", _bool, "true", "Create unknown topics named in Metadata requests."),
        Key("max.broker.partitions", _int, "50000", "Most partitions the broker holds (KIP-578's name; Kafka has no such limit). Beyond it CreateTopics answers POLICY_VIOLATION and Metadata auto-creation UNKNOWN_TOPIC_OR_PARTITION. An idle partition holds no file descriptor but costs about 3 KB of memory and a directory.", _at_least(1)),
        Key("default.replication.factor", _int, "1", "Replicas of an auto-created topic, and of CreateTopics' topics that ask for -1.", _at_least(1)),
        Key("broker.rack", _optional_str, "", "This broker's rack: new partitions' replicas are spread over racks first (Kafka's striped placement); none when empty."),
        Key("socket.request.max.bytes", _int, "104857600", "Largest request frame accepted.", _at_least(1)),
        Key("max.connections", _int, "2147483647", "Most client connections open at once, all listeners together; at the limit the broker accepts no more until one closes (they wait in the listen backlog).", _at_least(0)),
        Key("max.connections.per.ip", _int, "2147483647", "Most connections from one address; one more is closed as soon as it is accepted.", _at_least(0)),
        Key("max.connections.per.ip.overrides", _ip_overrides, "", "Per-address limits, HOST:COUNT,... (host names are resolved at start)."),
        Key("max.connection.creation.rate", _int, "2147483647", "Most new connections per second, all listeners together (KIP-612), and each listener's unless listener.name.<listener>.max.connection.creation.rate sets its own: over it the broker stops accepting for the time that brings the rate back (at most quota.window.size.seconds). The rate is measured over the client quotas' window.", _at_least(0)),
        Key("connections.max.idle.ms", _int, "600000", "Close a connection that has not completed a request for this long: time since its last response (or since it connected), so a client that dribbles a frame byte by byte is closed too. -1: never."),
        Key("queued.max.request.bytes", _int, "-1", "Most bytes of requests read and not yet handled, all connections together; a connection whose next request does not fit waits, reading nothing. -1: unbounded. Must be at least socket.request.max.bytes when set."),
        Key("sasl.server.max.receive.size", _int, "524288", "Largest request frame on a SASL listener before authentication completes.", _at_least(1)),
        Key("message.max.bytes", _int, "1048588", "Largest record batch accepted (topic: max.message.bytes).", _at_least(0)),
        Key("log.retention.check.interval.ms", _int, "300000", "How often retention is enforced.", _at_least(1)),
        Key("log.flush.scheduler.interval.ms", _int, "1000", "How often the flush.ms policy is checked.", _at_least(1)),
        Key("log.cleaner.enable", _bool, "true", "Run the log cleaner: compaction of topics whose cleanup.policy includes compact (Kafka's default). Off: compacted topics keep every record."),
        Key("log.cleaner.threads", _int, "1", "Accepted for Kafka's sake: one cleaner task cleans one log at a time, on a worker thread.", _at_least(0)),
        Key("log.cleaner.backoff.ms", _int, "15000", "How long the cleaner sleeps when no log needs cleaning.", _at_least(0)),
        Key("log.cleaner.dedupe.buffer.size", _int, "134217728", "Memory for the cleaner's key map: at most size / 24 x log.cleaner.io.buffer.load.factor keys per round (Kafka's 16-byte key hash and 8-byte offset per slot); a log with more keys is cleaned over several rounds.", _at_least(1)),
        Key("log.cleaner.io.buffer.load.factor", _float, "0.9", "How full the cleaner's key map may get.", lambda v: None if 0.0 < v <= 1.0 else "must be in (0, 1]"),
        Key("log.cleaner.io.buffer.size", _int, "524288", "Accepted for Kafka's sake (the cleaner reads segments 1 MiB at a time).", _at_least(0)),
        Key("log.cleaner.io.max.bytes.per.second", _float, "1.7976931348623157E308", "Accepted for Kafka's sake: the cleaner is not throttled.", _at_least(0)),
        Key("log.max.open.files", _int, "-1", "Segment files kept open at once (least recently used closed first, reopened on demand); -1: half of what the process's descriptor limit leaves after a reserve of 64, the other half being for connections.", lambda v: None if v == -1 or v >= 1 else "must be -1 or at least 1"),
        Key("num.recovery.threads.per.data.dir", _int, "2", "Threads that recover, at start, the partitions not closed cleanly whose last segment holds 1 MiB or more (smaller ones are recovered on the main thread, where threads would only contend for Python's GIL), then rebuild the producer state of those whose log runs 1 MiB or more past their newest snapshot, and that fsync the logs at a clean shutdown where the kernel has no syncfs (Kafka's default).", _at_least(1)),
        Key("fetch.max.bytes", _int, "57671680", "Cap on a Fetch response's size.", _at_least(1024)),
        Key("max.request.partition.size.limit", _int, "2000", "Most partitions one DescribeTopicPartitions response holds (the client pages for more).", _at_least(1)),
        Key("replica.lag.time.max.ms", _int, "30000", "A follower not caught up with its leader's log end for this long leaves the partition's ISR (Kafka's); one that catches up joins it again.", _at_least(1)),
        Key("replica.fetch.wait.max.ms", _int, "500", "How long a follower's fetch waits at its leader for new records.", _at_least(0)),
        Key("replica.fetch.min.bytes", _int, "1", "Bytes a follower's fetch waits for at its leader.", _at_least(1)),
        Key("replica.fetch.max.bytes", _int, "1048576", "Bytes a follower fetches of one partition at a time (at least one batch).", _at_least(0)),
        Key("replica.fetch.response.max.bytes", _int, "10485760", "Bytes a follower fetches in one fetch, all partitions together.", _at_least(0)),
        Key("replica.fetch.backoff.ms", _int, "1000", "How long a follower waits before fetching again after an error (its leader stopped, say).", _at_least(0)),
        Key("broker.session.timeout.ms", _int, "9000", "A broker that sends the controller no heartbeat for this long (killed) is fenced: its leaderships move to other ISR members and it leaves the ISRs.", _at_least(1)),
        Key("broker.heartbeat.interval.ms", _int, "2000", "How often a broker of a cluster tells the controller it is alive.", _at_least(1)),
        Key("auto.leader.rebalance.enable", _bool, "true", "Give each partition back to its preferred replica (the first) once it is up and in the ISR, every leader.imbalance.check.interval.seconds.", None),
        Key("leader.imbalance.check.interval.seconds", _int, "300", "How often the controller gives partitions back to their preferred leaders.", _at_least(1)),
        Key("offsets.topic.num.partitions", _int, "50", "Accepted for Kafka's configs: __consumer_offsets has one partition here, so one broker (its leader) coordinates every group.", _at_least(1)),
        Key("offsets.commit.timeout.ms", _int, "5000", "How long the group coordinator waits for the ISR of __consumer_offsets to acknowledge a write (an offset commit, a group's records) before answering COORDINATOR_NOT_AVAILABLE.", _at_least(1)),
        Key("offsets.topic.replication.factor", _int, "3", "Replicas of __consumer_offsets, made when it is created. Left at its default, at most the brokers of the cluster (one broker works); set, Kafka's rule: not created (FindCoordinator answers COORDINATOR_NOT_AVAILABLE) while fewer brokers are registered.", _at_least(1)),
        Key("transaction.state.log.num.partitions", _int, "50", "Accepted for Kafka's configs: __transaction_state has one partition here, so one broker (its leader) coordinates every transactional id.", _at_least(1)),
        Key("transaction.state.log.replication.factor", _int, "3", "Replicas of __transaction_state, made when it is created. Left at its default, at most the brokers of the cluster; set, Kafka's rule: not created while fewer brokers are registered.", _at_least(1)),
        Key("transaction.state.log.min.isr", _int, "2", "min.insync.replicas of __transaction_state, made when it is created; left at its default, at most its replication factor.", _at_least(1)),
        Key("producer.state.mode", _str, "lean", "lean (the lean producer state proposal: the latest batch per producer id) or kafka (Kafka's 5 batches).", _one_of("lean", "kafka")),
        Key("max.in.flight.sequence.number.per.connection", _int, "10000000", "lean mode: how far below the latest sequence a resent batch counts as a duplicate, in sequence numbers (the lean producer state proposal's default, 10 million); sent to producers in a tagged field of ApiVersions and InitProducerId responses.", lambda v: None if 1 <= v <= 1 << 30 else "must be between 1 and 2**30"),
        Key("producer.id.expiration.ms", _int, "86400000", "Idle producer ids are forgotten after this long.", _at_least(1)),
        Key("producer.id.expiration.check.interval.ms", _int, "600000", "How often idle producer ids are expired.", _at_least(1)),
        Key("producer.id.quota.error.code", _int, "19", "Error answered to a batch whose new producer id is over the user's producer_ids_rate (KIP-936), with throttle_time_ms set: 19 NOT_ENOUGH_REPLICAS, which every measured client retries (89 THROTTLING_QUOTA_EXCEEDED fails the send in librdkafka and aiokafka; see the clients' reactions in the documentation).", lambda v: None if 1 <= v <= 32767 else "must be an error code between 1 and 32767"),
        Key("audit.enable", _bool, "false", "Record every produce, fetch and InitProducerId decision (quota verdicts included) in the internal topic __minibroker_audit, for the pipeline."),
        Key("audit.flush.interval.ms", _int, "1000", "How often buffered audit events are appended to __minibroker_audit.", _at_least(1)),
        Key("audit.retention.ms", _int, "604800000", "retention.ms of the __minibroker_audit topic.", lambda v: None if v == -1 or v > 0 else "must be -1 or positive"),
        Key("fault.injection", _fault_rules, "", "Test faults, ';'-separated: API:drop|close|delay|error|lose[:every=N][:limit=N][:delay_ms=N][:error_code=N][:count=N][:client_id=ID] (see fault injection in the documentation)."),
        Key("group.initial.rebalance.delay.ms", _int, "0", "Wait for more members before a new group's first rebalance. Kafka's default is 3000; 0 (what Kafka's own config/server.properties sets for development) lets a lone test consumer join at once.", _at_least(0)),
        Key("group.min.session.timeout.ms", _int, "1000", "Shortest session timeout a member may ask for. Kafka's is 6000; 1000 lets tests use short sessions to see members expire quickly.", _at_least(0)),
        Key("group.max.session.timeout.ms", _int, "1800000", "Longest session timeout a member may ask for (Kafka's default).", _at_least(0)),
        Key("group.coordinator.rebalance.protocols", _group_protocols, "classic,consumer,streams", "The group protocols served: classic (JoinGroup/SyncGroup), consumer (KIP-848's ConsumerGroupHeartbeat) and streams (KIP-1071's StreamsGroupHeartbeat, also gated by the streams.version feature); a protocol left out answers its heartbeat and describe UNSUPPORTED_VERSION (Kafka 4.4's default)."),
        Key("group.consumer.session.timeout.ms", _int, "10000", "A KIP-848 consumer group member that sends no heartbeat for this long is fenced and its partitions go to the others. Kafka's default is 45000; 10000 makes a test's crashed consumer fail over quickly.", _at_least(1)),
        Key("group.consumer.heartbeat.interval.ms", _int, "1000", "How often KIP-848 consumers heartbeat (the coordinator tells them); a member learns of a new assignment at its next heartbeat. Kafka's default is 5000; 1000 lets a test's group rebalance in about a second.", _at_least(1)),
        Key("group.consumer.max.size", _int, "2147483647", "Most members of one KIP-848 consumer group; one more gets GROUP_MAX_SIZE_REACHED (Kafka's default).", _at_least(1)),
        Key("group.consumer.assignors", _assignors, "uniform,range", "The server-side assignors KIP-848 members may choose (group.remote.assignor); the first is the default (Kafka's default; its class names are accepted too)."),
        Key("group.streams.session.timeout.ms", _int, "10000", "A streams group member (Kafka Streams with group.protocol=streams, KIP-1071) that sends no heartbeat for this long is fenced and its tasks go to the others. Kafka's default is 45000; 10000 makes a test's crashed Streams instance fail over quickly.", _at_least(1)),
        Key("group.streams.min.session.timeout.ms", _int, "1000", "The smallest group.streams.session.timeout.ms allowed. Kafka's default is 45000; 1000 lets tests use short sessions.", _at_least(1)),
        Key("group.streams.max.session.timeout.ms", _int, "60000", "The largest group.streams.session.timeout.ms allowed (Kafka's default).", _at_least(1)),
        Key("group.streams.heartbeat.interval.ms", _int, "1000", "How often streams group members heartbeat (the coordinator tells them); a member learns of new tasks at its next heartbeat. Kafka's default is 5000; 1000 lets a test's Streams application rebalance in about a second.", _at_least(1)),
        Key("group.streams.min.heartbeat.interval.ms", _int, "100", "The smallest group.streams.heartbeat.interval.ms allowed. Kafka's default is 5000.", _at_least(1)),
        Key("group.streams.max.heartbeat.interval.ms", _int, "15000", "The largest group.streams.heartbeat.interval.ms allowed (Kafka's default).", _at_least(1)),
        Key("group.streams.max.size", _int, "2147483647", "Most members (stream threads) of one streams group; one more gets GROUP_MAX_SIZE_REACHED (Kafka's default).", _at_least(1)),
        Key("group.streams.num.standby.replicas", _int, "0", "Standby tasks per stateful task that the coordinator assigns in streams groups (the application's num.standby.replicas does not apply under group.protocol=streams; Kafka's default).", _at_least(0)),
        Key("group.streams.max.standby.replicas", _int, "2", "The largest group.streams.num.standby.replicas allowed (Kafka's default).", _at_least(0)),
        Key("group.streams.initial.rebalance.delay.ms", _int, "0", "How long a new streams group waits for more members before its first task assignment (the heartbeat says ASSIGNMENT_DELAYED meanwhile). Kafka's default is 3000; 0 lets a test's application start at once.", _at_least(0)),
        Key("group.streams.assignment.interval.ms", _int, "0", "The least time between two task assignments of one streams group; a heartbeat that would assign sooner says ASSIGNMENT_DELAYED and a later one assigns. Kafka's default is 1000; 0 assigns at once.", _at_least(0)),
        Key("group.streams.task.offset.interval.ms", _int, "60000", "How often streams group members report their tasks' changelog offsets (the coordinator tells them; Kafka's default).", _at_least(1)),
        Key("group.streams.acceptable.recovery.lag", _int, "10000", "The lag (offsets) under which a Streams instance counts as caught up on a task, told to members (Kafka's default).", _at_least(0)),
        Key("group.streams.assignors", _streams_assignors, "sticky", "The server-side task assignors of streams groups: sticky, Kafka's only built-in one (its class name is accepted too)."),
        Key("streams.version", _int, "1", "The streams.version feature (KIP-1071) a new data directory is finalized at, as `kafka-storage format --feature` sets it: 1 serves streams groups (Kafka 4.4's default on a new cluster), 0 answers StreamsGroupHeartbeat and StreamsGroupDescribe UNSUPPORTED_VERSION. UpdateFeatures changes it later, kept in the data directory.", _one_of(0, 1)),
        Key("share.version", _int, "1", "The share.version feature (KIP-932) a new data directory is finalized at, as `kafka-storage format --feature` sets it: 1 serves share groups (ShareGroupHeartbeat, ShareFetch, ShareAcknowledge, the share admin APIs); 0 answers them UNSUPPORTED_VERSION. UpdateFeatures changes it later, kept in the data directory. Kafka 4.4 finalizes 2 on a new cluster (2 adds the dead-letter queue of KIP-1191, not served here).", lambda v: None if v in (0, 1) else "must be 0 or 1 (2, the dead-letter queue, is not supported)"),
        Key("group.share.session.timeout.ms", _int, "10000", "A share group member that sends no heartbeat for this long is fenced (the group's share.session.timeout.ms overrides it). Kafka's default is 45000; 10000 lets a test's crashed share consumer leave its group quickly.", _at_least(1)),
        Key("group.share.min.session.timeout.ms", _int, "1000", "The smallest share.session.timeout.ms a group may set. Kafka's default is 45000; 1000 lets tests use short sessions.", _at_least(1)),
        Key("group.share.max.session.timeout.ms", _int, "60000", "The largest share.session.timeout.ms a group may set (Kafka's default).", _at_least(1)),
        Key("group.share.heartbeat.interval.ms", _int, "1000", "How often share consumers heartbeat (the coordinator tells them; the group's share.heartbeat.interval.ms overrides it). Kafka's default is 5000; 1000 lets a test's share group rebalance in about a second.", _at_least(1)),
        Key("group.share.min.heartbeat.interval.ms", _int, "100", "The smallest share.heartbeat.interval.ms a group may set. Kafka's default is 5000.", _at_least(1)),
        Key("group.share.max.heartbeat.interval.ms", _int, "15000", "The largest share.heartbeat.interval.ms a group may set (Kafka's default).", _at_least(1)),
        Key("group.share.max.size", _int, "200", "Most members of one share group; one more gets GROUP_MAX_SIZE_REACHED (Kafka's default).", lambda v: None if 1 <= v <= 1000 else "must be between 1 and 1000"),
        Key("group.share.assignors", _share_assignors, "simple", "The server-side assignors of share groups: simple, Kafka's only one (its class name is accepted too)."),
        Key("group.share.record.lock.duration.ms", _int, "10000", "How long a share consumer holds the records it acquired before they become available to others again (the group's share.record.lock.duration.ms overrides it). Kafka's default is 30000; 10000 brings a test's stalled consumer's records back in seconds.", _at_least(1000)),
        Key("group.share.min.record.lock.duration.ms", _int, "1000", "The smallest share.record.lock.duration.ms a group may set. Kafka's default is 15000; 1000 lets tests see a lock expire quickly.", lambda v: None if 1000 <= v <= 30000 else "must be between 1000 and 30000"),
        Key("group.share.max.record.lock.duration.ms", _int, "60000", "The largest share.record.lock.duration.ms a group may set (Kafka's default).", lambda v: None if 30000 <= v <= 3600000 else "must be between 30000 and 3600000"),
        Key("group.share.delivery.count.limit", _int, "5", "Delivery attempts of a record before it is archived instead of made available again (the group's share.delivery.count.limit overrides it; Kafka's default).", lambda v: None if 2 <= v <= 10 else "must be between 2 and 10"),
        Key("group.share.min.delivery.count.limit", _int, "2", "The smallest share.delivery.count.limit a group may set (Kafka's default).", lambda v: None if 2 <= v <= 5 else "must be between 2 and 5"),
        Key("group.share.max.delivery.count.limit", _int, "10", "The largest share.delivery.count.limit a group may set (Kafka's default).", lambda v: None if 5 <= v <= 25 else "must be between 5 and 25"),
        Key("group.share.partition.max.record.locks", _int, "2000", "Most records of one share partition in flight (between its start and end offsets) at once (the group's share.partition.max.record.locks overrides it; Kafka's default).", lambda v: None if 100 <= v <= 10000 else "must be between 100 and 10000"),
        Key("group.share.min.partition.max.record.locks", _int, "100", "The smallest share.partition.max.record.locks a group may set (Kafka's default).", lambda v: None if 100 <= v <= 2000 else "must be between 100 and 2000"),
        Key("group.share.max.partition.max.record.locks", _int, "4000", "The largest share.partition.max.record.locks a group may set (Kafka's default).", lambda v: None if 2000 <= v <= 10000 else "must be between 2000 and 10000"),
        Key("group.share.assignment.interval.ms", _int, "0", "The least time between two target assignments of one share group (KIP-1263; the group's share.assignment.interval.ms overrides it): a heartbeat that would assign sooner leaves the members on the last assignment and a later one assigns. Kafka's default is 1000; 0 assigns at once, so a test's second share consumer gets its partitions at its join.", _at_least(0)),
        Key("group.share.min.assignment.interval.ms", _int, "0", "The smallest share.assignment.interval.ms a group may set (Kafka's default).", _at_least(0)),
        Key("group.share.max.assignment.interval.ms", _int, "15000", "The largest share.assignment.interval.ms a group may set (Kafka's default).", _at_least(0)),
        Key("group.share.max.share.sessions", _int, "2000", "Most share sessions open at once; one more ShareFetch opening a session waits its max wait and gets SHARE_SESSION_LIMIT_REACHED (Kafka's default).", _at_least(1)),
        Key("share.coordinator.snapshot.update.records.per.snapshot", _int, "500", "Updates of a share partition's state written to __share_group_state before a whole snapshot is written again (Kafka's default).", lambda v: None if 0 <= v <= 500 else "must be between 0 and 500"),
        Key("share.coordinator.state.topic.replication.factor", _int, "3", "Replicas of __share_group_state, made when it is created. Left at its default, at most the brokers of the cluster; set, Kafka's rule: not created while fewer brokers are registered.", _at_least(1)),
        Key("share.coordinator.state.topic.min.isr", _int, "2", "min.insync.replicas of __share_group_state, made when it is created; left at its default, at most its replication factor.", _at_least(1)),
        Key("share.coordinator.write.timeout.ms", _int, "5000", "How long the share coordinator waits for a write to __share_group_state to be acknowledged by its in-sync replicas before the acknowledgements it holds are answered COORDINATOR_NOT_AVAILABLE (Kafka's default).", _at_least(1)),
        Key("share.coordinator.state.topic.prune.interval.ms", _int, "300000", "How often the records of __share_group_state no state needs any more are deleted (Kafka's default).", _at_least(1)),
        Key("offsets.retention.minutes", _int, "10080", "Committed offsets of a group Empty this long (or of a simple group, this long after the commit) expire (KIP-211).", _at_least(1)),
        Key("offsets.retention.check.interval.ms", _int, "600000", "How often committed offsets are checked for expiry.", _at_least(1)),
        Key("transaction.max.timeout.ms", _int, "900000", "Longest transaction.timeout.ms a transactional producer may ask for; InitProducerId with a longer one is answered INVALID_TRANSACTION_TIMEOUT.", _at_least(1)),
        Key("transactional.id.expiration.ms", _int, "604800000", "A transactional id with no transaction open and no request for this long is forgotten (a tombstone in __transaction_state).", _at_least(1)),
        Key("transaction.abort.timed.out.transaction.cleanup.interval.ms", _int, "10000", "How often transactions open longer than their timeout are aborted (their producer fenced by an epoch bump).", _at_least(1)),
        Key("transaction.remove.expired.transaction.cleanup.interval.ms", _int, "3600000", "How often transactional ids past transactional.id.expiration.ms are removed.", _at_least(1)),
        Key("max.incremental.fetch.session.cache.slots", _int, "1000", "KIP-227: how many incremental fetch sessions the broker keeps (each spares a consumer re-sending every partition on every fetch); 0 turns them off.", _at_least(0)),
        Key("telemetry.max.bytes", _int, "1048576", "KIP-714: the largest client telemetry push accepted (PushTelemetry; TELEMETRY_TOO_LARGE past it).", _at_least(1)),
        Key("transaction.version", _int, "2", "The transaction.version feature a new data directory is finalized at (KIP-890 part 2: 2 makes Kafka 4 clients bump the epoch at every transaction and add partitions with Produce; 1 and 0 keep them on the older protocol). As `kafka-storage format --feature`: UpdateFeatures changes it later, kept in the data directory.", _one_of(0, 1, 2)),
        Key("transaction.partition.verification.enable", _bool, "true", "KIP-890 part 1: a transactional batch is appended only to a partition of its producer's ongoing transaction (else INVALID_TXN_STATE, TRANSACTION_ABORTABLE from Produce v11).", None),
        Key("quota.window.num", _int, "11", "Samples in a client quota's rate window (Kafka: 11, the current one plus 10 whole ones).", _at_least(1)),
        Key("quota.window.size.seconds", _int, "1", "Length of one client quota sample.", _at_least(1)),
        Key("quota.algorithm", _str, "sampled", "How client byte-rate and request-time quotas are enforced: sampled (Kafka's windowed rate over quota.window.num samples) or token_bucket (KIP-599's bucket, as Redpanda: a burst of quota.window.num x quota.window.size.seconds x the quota, then the quota, with no bursts as samples expire).", _one_of("sampled", "token_bucket")),
        Key("client.quota.callback.class", _str, "", "A ClientQuotaCallback (package.module:Class) instead of the default <user, client-id> quotas (KIP-257)."),
        Key("producer.id.quota.window.size.seconds", _int, "3600", "The window W of producer_ids_rate (KIP-936): a user may introduce producer_ids_rate new producer ids in any W; Bloom layers live W.", _at_least(1)),
        Key("producer.id.quota.window.num", _int, "11", "Kept from KIP-936's table so its configs load; no effect (the window is one producer.id.quota.window.size.seconds, in producer.id.quota.cache.layer.count layers).", _at_least(1)),
        Key("producer.id.quota.cache.layer.count", _int, "4", "Bloom layers per producer-id quota window: a new layer (and admission slot) every window.size / layer.count, or sooner when the newest layer is full (KIP-936).", _at_least(1)),
        Key("producer.id.quota.cache.false.positive.rate", _float, "0.001", "False-positive rate of each Bloom layer of the producer-id quota (KIP-936); a claimed id is checked against producer state.", lambda v: None if 0.0 < v < 1.0 else "must be between 0 and 1 (exclusive)"),
        Key("producer.id.quota.cache.cleanup.scheduler.interval.ms", _int, "10", "The most often expired producer-id quota layers and idle users are dropped; it wakes only when one is due (KIP-936's default).", _at_least(1)),
        Key("sasl.enabled.mechanisms", _mechanisms, "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", "SASL mechanisms offered on SASL_PLAINTEXT and SASL_SSL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (Kafka's default is GSSAPI, which is not served; OAUTHBEARER, whose default validator trusts unsigned tokens, is only offered when named)."),
        Key("sasl.users", _users, "", "Users of the SASL listeners, NAME:PASSWORD,... for PLAIN and SCRAM (SCRAM credentials are derived at start: random salt, 4096 iterations); PLAIN also takes the user_NAME=\"PASSWORD\" options of listener.name.<l>.plain.sasl.jaas.config.", sensitive=True),
        Key("connections.max.reauth.ms", _int, "0", "KIP-368: a SASL session lasts at most this long (and never past an OAUTHBEARER token's expiry); the client is told in SaslAuthenticate and must re-authenticate before, or the connection is closed at its next request. 0: sessions never expire (Kafka's default). Per listener and mechanism: listener.name.<l>.<mechanism>.connections.max.reauth.ms.", _at_least(0)),
        Key("ssl.keystore.type", _str, "JKS", "The format of the keystore: PEM or PKCS12 (JKS, Kafka's default, is read when the file is PKCS12 or PEM, as Java reads a PKCS12 file named JKS; a real JKS file must be converted: keytool -importkeystore -deststoretype PKCS12).", _one_of("JKS", "PKCS12", "PEM")),
        Key("ssl.keystore.location", _str, "", "The keystore file: the listener's certificate chain and private key."),
        Key("ssl.keystore.password", _str, "", "The keystore's password (PKCS12; a PEM keystore file takes none, as in Kafka: its key's is ssl.key.password).", sensitive=True),
        Key("ssl.key.password", _str, "", "The private key's password (an encrypted PEM key, or a PKCS12 key protected apart from its store).", sensitive=True),
        Key("ssl.keystore.certificate.chain", _str, "", "ssl.keystore.type=PEM without a file: the certificate chain, PEM, in the value itself.", sensitive=True),
        Key("ssl.keystore.key", _str, "", "ssl.keystore.type=PEM without a file: the private key, PEM (PKCS#8, encrypted with ssl.key.password if it is set), in the value itself.", sensitive=True),
        Key("ssl.truststore.type", _str, "JKS", "The format of the truststore: PEM or PKCS12 (JKS as for ssl.keystore.type).", _one_of("JKS", "PKCS12", "PEM")),
        Key("ssl.truststore.location", _str, "", "The truststore file: the CA certificates client certificates are checked against (ssl.client.auth)."),
        Key("ssl.truststore.password", _str, "", "The truststore's password (PKCS12).", sensitive=True),
        Key("ssl.truststore.certificates", _str, "", "ssl.truststore.type=PEM without a file: the trusted certificates, PEM, in the value itself.", sensitive=True),
        Key("ssl.client.auth", _str, "none", "Client certificates on SSL and SASL_SSL listeners: none, requested (checked when the client sends one) or required (a client without a trusted certificate fails the handshake).", _one_of("none", "requested", "required")),
        Key("ssl.protocol", _str, "TLSv1.3", "Accepted for Kafka's sake: the protocols a listener speaks are ssl.enabled.protocols.", _one_of("TLSv1.2", "TLSv1.3", "TLS")),
        Key("ssl.enabled.protocols", _protocols, "TLSv1.2,TLSv1.3", "The TLS versions a listener accepts (TLSv1.2, TLSv1.3)."),
        Key("ssl.cipher.suites", _list, "", "The cipher suites a listener accepts, by Kafka's (IANA) names, e.g. TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384; empty: the TLS library's defaults. A list with no TLS 1.3 suite leaves TLS 1.3 off, as in Java; TLS 1.3's own suites are always the library's defaults (Python's ssl module cannot narrow them)."),
        Key("ssl.endpoint.identification.algorithm", _str, "https", "Accepted for Kafka's sake: it is a client-side check (a client with https checks the broker certificate's name), and the broker makes no TLS connections of its own.", _one_of("https", "")),
        Key("ssl.principal.mapping.rules", _principal_rules, "DEFAULT", "How the subject of an SSL client's certificate becomes its principal's name: Kafka's rules, RULE:pattern/replacement/[LU],... tried in order, DEFAULT taking the whole distinguished name (User:CN=alice,OU=...)."),
        Key("ssl.keymanager.algorithm", _str, "SunX509", "Accepted for Kafka's sake (a Java setting; no effect)."),
        Key("ssl.trustmanager.algorithm", _str, "PKIX", "Accepted for Kafka's sake (a Java setting; no effect)."),
        Key("authorizer.class.name", _str, "", "Turns ACLs on: org.apache.kafka.metadata.authorizer.StandardAuthorizer (Kafka's; kafka.security.authorizer.AclAuthorizer is taken as the same), or a Python class (package.module:Class) with authorize(). Empty: every principal may do everything (Kafka's default)."),
        Key("super.users", _super_users, "", "Principals allowed everything whatever the ACLs say, ';'-separated: User:admin;User:CN=ops,O=example."),
        Key("allow.everyone.if.no.acl.found", _bool, "false", "With an authorizer: whether an action on a resource no ACL matches is allowed (Kafka's default: denied)."),
        Key("connection.failed.authentication.delay.ms", _int, "100", "How long a failed SASL authentication waits before its answer and the close (Kafka's default), to slow down clients retrying a wrong password.", _at_least(0)),
        Key("control.listen", _control_address, "", "HOST:PORT of the HTTP control endpoint (docs/control.md): error stacks, delays, captured requests, the clock, stopping and starting brokers, from any language; off when empty. Loopback only unless it names another address."),
        Key("control.capture.requests", _int, "0", "How many of the latest requests the broker keeps for tests to read (docs/control.md); 0 keeps none. --control-listen and running_broker keep 1000.", _at_least(0)),
        Key("metrics.listen", _optional_host_port, "", "HOST:PORT of an HTTP server answering GET /metrics in Prometheus text format; off when empty."),
    ]
}


def _parse_value(name: str, key: Key, raw: str) -> Any:
    """`raw` parsed and checked as `key`; a ConfigError naming `name` when it is not valid."""
    try:
        value = key.parse(raw)
    except ValueError as exc:
        raise ConfigError(name, str(exc)) from None
    if key.check is not None and (reason := key.check(value)) is not None:
        raise ConfigError(name, f"{raw!r} {reason}")
    return value


def _listener_key(key: str) -> tuple[str, str] | None:
    """`listener.name.plaintext.max.connection.creation.rate` -> ("plaintext", "max.connection.creation.rate");
    `listener.name.sasl_ssl.oauthbearer.sasl.jaas.config` -> ("sasl_ssl", "oauthbearer.sasl.jaas.config")."""
    if not key.startswith(LISTENER_CONFIG_PREFIX):
        return None
    listener, dot, suffix = key[len(LISTENER_CONFIG_PREFIX):].partition(".")
    if not dot or not listener:
        return None
    if suffix in LISTENER_KEYS:
        return listener.lower(), suffix
    mechanism, dot, name = suffix.partition(".")
    if dot and name in MECHANISM_KEYS and mechanism.upper() in SASL_MECHANISMS:
        return listener.lower(), f"{mechanism.lower()}.{name}"
    return None


def _mechanism_key(listener_key: str) -> Key:
    """How a per-mechanism key (`oauthbearer.sasl.jaas.config`) is parsed and checked."""
    name = listener_key.partition(".")[2]
    if name == "connections.max.reauth.ms":
        return BROKER_CONFIGS[name]
    if name == "sasl.jaas.config":
        return Key(name, _jaas, "", "", sensitive=True)
    return Key(name, _str, "", "", _one_of("", OAUTHBEARER_UNSECURED_VALIDATOR))


# The one server callback handler OAUTHBEARER has here: Kafka's default, which validates unsecured
# (unsigned) JWTs (minibroker.oauthbearer).
OAUTHBEARER_UNSECURED_VALIDATOR = (
    "org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler")


def _jaas(value: str):
    from minibroker.jaas import parse_jaas_config

    return parse_jaas_config(value)


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """Parse Kafka-style `key=value` lines (`#`/`!` comments, `:` separators, `\\` continuations)."""
    props: dict[str, str] = {}
    pending = ""
    for number, raw in enumerate(text.splitlines(), 1):
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        separators = [i for i in (line.find("="), line.find(":")) if i > 0]
        if not separators:
            raise ConfigError(line, f"{source}:{number}: expected key=value")
        at = min(separators)
        props[line[:at].strip()] = line[at + 1 :].strip()
    return props


class BrokerConfig:
    """Typed broker settings plus the raw properties (storage reads the log.* keys from them)."""

    def __init__(self, props: dict[str, str] | None = None) -> None:
        self.props: dict[str, str] = dict(props or {})
        self._values: dict[str, Any] = {}
        for name, key in BROKER_CONFIGS.items():
            self._values[name] = _parse_value(name, key, self.props.get(name, key.default))
        self._listener_values: dict[tuple[str, str], Any] = {}
        for raw_key, raw in self.props.items():
            parsed = _listener_key(raw_key)
            if parsed is not None:
                key = BROKER_CONFIGS.get(parsed[1]) or _mechanism_key(parsed[1])
                self._listener_values[parsed] = _parse_value(raw_key, key, raw)
        self._check_together()
        # The log.* keys belong to storage, which validates them (a ConfigError naming the key).
        self.log_config = LogConfig.from_broker(self.props)

    def _check_together(self) -> None:
        """Kafka's KafkaConfig.validateValues for the keys that constrain each other."""
        queued, frame = self["queued.max.request.bytes"], self["socket.request.max.bytes"]
        if 0 < queued < frame:
            raise ConfigError("queued.max.request.bytes",
                              f"{queued} must be -1 or at least socket.request.max.bytes ({frame})")
        if self["max.connections.per.ip"] == 0 and not self["max.connections.per.ip.overrides"]:
            raise ConfigError("max.connections.per.ip",
                              "0 is allowed only with max.connections.per.ip.overrides")
        interval, session = self["group.consumer.heartbeat.interval.ms"], self["group.consumer.session.timeout.ms"]
        if interval >= session:
            raise ConfigError("group.consumer.heartbeat.interval.ms",
                              f"{interval} must be less than group.consumer.session.timeout.ms ({session})")
        interval, session = self["group.streams.heartbeat.interval.ms"], self["group.streams.session.timeout.ms"]
        if interval >= session:
            raise ConfigError("group.streams.heartbeat.interval.ms",
                              f"{interval} must be less than group.streams.session.timeout.ms ({session})")
        # Kafka's GroupCoordinatorConfig: each streams default within its own bounds.
        for name, low, high in (("session.timeout.ms", "min.session.timeout.ms", "max.session.timeout.ms"),
                                ("heartbeat.interval.ms", "min.heartbeat.interval.ms", "max.heartbeat.interval.ms"),
                                ("num.standby.replicas", None, "max.standby.replicas")):
            value, high_value = self[f"group.streams.{name}"], self[f"group.streams.{high}"]
            low_value = self[f"group.streams.{low}"] if low is not None else 0
            if not low_value <= value <= high_value:
                bound = f"group.streams.{low} ({low_value}) and " if low is not None else "0 and "
                raise ConfigError(f"group.streams.{name}", f"{value} must be between {bound}group.streams.{high} "
                                                           f"({high_value})")
        interval, session = self["group.share.heartbeat.interval.ms"], self["group.share.session.timeout.ms"]
        if interval >= session:
            raise ConfigError("group.share.heartbeat.interval.ms",
                              f"{interval} must be less than group.share.session.timeout.ms ({session})")
        # Kafka's GroupCoordinatorConfig and ShareGroupConfig: each default within its own bounds.
        for name, low, high in (("session.timeout.ms", "min.session.timeout.ms", "max.session.timeout.ms"),
                                ("heartbeat.interval.ms", "min.heartbeat.interval.ms", "max.heartbeat.interval.ms"),
                                ("record.lock.duration.ms", "min.record.lock.duration.ms", "max.record.lock.duration.ms"),
                                ("delivery.count.limit", "min.delivery.count.limit", "max.delivery.count.limit"),
                                ("partition.max.record.locks", "min.partition.max.record.locks",
                                 "max.partition.max.record.locks"),
                                ("assignment.interval.ms", "min.assignment.interval.ms", "max.assignment.interval.ms")):
            value, minimum, maximum = (self[f"group.share.{n}"] for n in (name, low, high))
            if not minimum <= value <= maximum:
                raise ConfigError(f"group.share.{name}", f"{value} must be between group.share.{low} ({minimum}) and "
                                                         f"group.share.{high} ({maximum})")
        protocols = self["listener.security.protocol.map"]
        for entry in self["listeners"]:
            if entry.name not in protocols:
                raise ConfigError("listener.security.protocol.map",
                                  f"no security protocol for listener {entry.name} (map it: {entry.name}:SSL, ...)")
        names = {entry.name for entry in self["listeners"]}
        for entry in self["advertised.listeners"]:
            if entry.name not in names:
                raise ConfigError("advertised.listeners", f"listener {entry.name} is not one of listeners")
        idle, delay = self["connections.max.idle.ms"], self["connection.failed.authentication.delay.ms"]
        if idle >= 0 and delay >= idle:
            raise ConfigError("connection.failed.authentication.delay.ms",
                              f"{delay} must be less than connections.max.idle.ms ({idle})")

    @classmethod
    def load(
        cls, config_file: Path | None = None, overrides: dict[str, str] | None = None
    ) -> BrokerConfig:
        props: dict[str, str] = {}
        if config_file is not None:
            props.update(parse_properties(config_file.read_text(), str(config_file)))
        props.update(overrides or {})
        return cls(props)

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def unknown_keys(self) -> list[str]:
        """Supplied keys nothing reads; keys under `client.quota.callback.` belong to the callback."""
        return sorted(k for k in self.props if k not in BROKER_CONFIGS and k not in BROKER_LOG_KEYS
                      and not k.startswith(CALLBACK_CONFIG_PREFIX) and _listener_key(k) is None)

    def listener_value(self, listener: str, name: str) -> Any:
        """A per-listener setting: `listener.name.<listener>.<name>` when given, else `name` (Kafka
        configures each listener with valuesWithPrefixOverride)."""
        return self._listener_values.get((listener.lower(), name), self[name])

    def listener_protocol(self, listener: str) -> str:
        """The security protocol of a listener name (listener.security.protocol.map)."""
        return self["listener.security.protocol.map"][listener.upper()]

    def mechanism_value(self, listener: str, mechanism: str, name: str, default: Any = None) -> Any:
        """A per-listener, per-mechanism setting: `listener.name.<l>.<mechanism>.<name>`, else
        `listener.name.<l>.<name>`, else `name` when it is a broker key, else `default`."""
        values = self._listener_values
        found = values.get((listener.lower(), f"{mechanism.lower()}.{name}"))
        if found is not None:
            return found
        if name in BROKER_CONFIGS:
            return self.listener_value(listener, name)
        return default

    def listener_overrides(self) -> dict[tuple[str, str], Any]:
        """(listener in lower case, key) -> value of every `listener.name.<listener>.<key>` given."""
        return dict(self._listener_values)

    def effective_props(self) -> dict[str, str]:
        """Every known key at its configured or default value, plus every other supplied key: what a
        pluggable class's `configure` receives (Kafka passes its plugins the whole config)."""
        return {**{name: key.default for name, key in BROKER_CONFIGS.items()}, **self.props}

    @property
    def data_dir(self) -> Path:
        return Path(self["log.dirs"])


def help_table() -> str:
    """The broker settings for `serve --help`: name, then its documentation wrapped beneath."""
    import textwrap

    lines = []
    for name, key in BROKER_CONFIGS.items():
        lines.append(f"  {name} (default: {key.default or 'none'})")
        lines.extend(textwrap.wrap(key.doc, width=88, initial_indent="      ", subsequent_indent="      "))
    return "\n".join(lines)
