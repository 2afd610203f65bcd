"""Broker configuration: Kafka's config names, Kafka-style properties files, clear errors.

Every key the broker reads is declared once in BROKER_CONFIGS with its type, default and a line of
documentation; `minibroker serve --help-config` prints the table. Log settings (log.segment.bytes,
log.retention.ms, ...) are validated by storage's LogConfig, which owns their meaning. An unknown key is
logged and kept (Kafka does the same: "was supplied but isn't a known config"); a bad value stops the
broker with a message naming the key and the reason.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from storage.config import BROKER_LOG_KEYS, LogConfig
from storage.config import ConfigError as StorageConfigError

log = logging.getLogger(__name__)


class ConfigError(ValueError):
    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"invalid value for {key}: {reason}")
        self.key = key
        self.reason = reason


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


@dataclass(frozen=True)
class Key:
    name: str
    parse: Callable[[str], Any]
    default: str
    doc: str
    check: Callable[[Any], str | None] | None = None  # returns a reason when the value is bad


def _at_least(minimum: float) -> Callable[[Any], str | None]:
    return lambda v: None if v >= minimum else f"must be at least {minimum}"


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}"


BROKER_CONFIGS: dict[str, Key] = {
    k.name: k
    for k in [
        Key("listeners", _host_port, "127.0.0.1:9092", "Where the broker listens (HOST:PORT; port 0 picks one)."),
        Key("advertised.listeners", _str, "", "HOST:PORT given to clients in Metadata; defaults to the bound address."),
        Key("log.dirs", _str, "./data", "The data directory: partition logs, producer ids, metadata."),
        Key("node.id", _int, "1", "This broker's id, also reported as the controller.", _at_least(0)),
        Key("cluster.id", _str, "", "Cluster id; generated once and kept in meta.properties when empty."),
        Key("num.partitions", _int, "1", "Partitions of an auto-created topic.", _at_least(1)),
        Key("auto.create.topics.enable", _bool, "true", "Create unknown topics named in Metadata requests."),
        Key("default.replication.factor", _int, "1", "Only 1 is possible with one broker.", _one_of(1)),
        Key("socket.request.max.bytes", _int, "104857600", "Largest request frame accepted.", _at_least(1)),
        Key("message.max.bytes", _int, "1048588", "Largest record batch accepted (topic: max.message.bytes).", _at_least(0)),
        Key("log.retention.check.interval.ms", _int, "300000", "How often retention is enforced.", _at_least(1)),
        Key("log.flush.scheduler.interval.ms", _int, "1000", "How often the flush.ms policy is checked.", _at_least(1)),
        Key("fetch.max.bytes", _int, "57671680", "Cap on a Fetch response's size.", _at_least(1024)),
        Key("group.initial.rebalance.delay.ms", _int, "0", "Wait for more members before a new group's first rebalance. Kafka's default is 3000; 0 (what Kafka's own config/server.properties sets for development) lets a lone test consumer join at once.", _at_least(0)),
        Key("group.min.session.timeout.ms", _int, "1000", "Shortest session timeout a member may ask for. Kafka's is 6000; 1000 lets tests use short sessions to see members expire quickly.", _at_least(0)),
        Key("group.max.session.timeout.ms", _int, "1800000", "Longest session timeout a member may ask for (Kafka's default).", _at_least(0)),
        Key("offsets.retention.minutes", _int, "10080", "Committed offsets of a group Empty this long (or of a simple group, this long after the commit) expire (KIP-211).", _at_least(1)),
        Key("offsets.retention.check.interval.ms", _int, "600000", "How often committed offsets are checked for expiry.", _at_least(1)),
    ]
}


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
            raw = self.props.get(name, key.default)
            try:
                value = key.parse(raw)
            except ValueError as exc:
                raise ConfigError(name, str(exc)) from None
            if key.check is not None and (reason := key.check(value)) is not None:
                raise ConfigError(name, f"{raw!r} {reason}")
            self._values[name] = value
        # The log.* keys belong to storage, which validates them; fail here, at load, with the key.
        try:
            self.log_config = LogConfig.from_broker(self.props)
        except StorageConfigError as exc:
            raise ConfigError(exc.key, exc.reason) from None

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

    def get(self, name: str, default: str) -> str:
        """A raw property that another module (storage, quotas) parses and validates."""
        return self.props.get(name, default)

    def unknown_keys(self) -> list[str]:
        return sorted(k for k in self.props if k not in BROKER_CONFIGS and k not in BROKER_LOG_KEYS)

    def describe(self) -> list[tuple[str, str, bool]]:
        """(name, value, is_default) for DescribeConfigs on the broker resource."""
        return [
            (name, self.props.get(name, key.default), name not in self.props)
            for name, key in sorted(BROKER_CONFIGS.items())
        ]

    @property
    def data_dir(self) -> Path:
        return Path(self["log.dirs"])


def help_table() -> str:
    width = max(len(n) for n in BROKER_CONFIGS)
    return "\n".join(
        f"  {name:<{width}}  {key.doc} (default: {key.default or 'none'})"
        for name, key in BROKER_CONFIGS.items()
    )
