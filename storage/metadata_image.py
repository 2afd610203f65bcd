"""The cluster's metadata as one object, and the records that change it: Kafka's `MetadataImage`
(metadata/src/main/java/org/apache/kafka/image/MetadataImage.java) built by replaying KRaft's
`__cluster_metadata` records (metadata/src/main/resources/common/metadata/*Record.json).

One `MetadataImage` owns what is cluster-wide: topics and their ids, every partition's replicas,
ISR, leader and leader epoch, topic configs and the broker-level (cluster-default and per-broker)
and group-level configs, client quotas, SCRAM credentials, the next producer-id block, and the
registered brokers. The controller (minibroker.controller) decides changes, writes them as records
to the metadata log (minibroker.storage.metadata_log) and applies the same records here, so the
image after a restart is the image before it.

The records carry Kafka's names and fields (snake_case), one per kind of change:

    TopicRecord                     a topic and its id
    PartitionRecord                 a partition's full registration (replicas, ISR, leader, epochs)
    PartitionChangeRecord           a change to one (a new ISR, leader or replica set); a leader
                                    given, even the same one, is a new leader epoch, as in Kafka's
                                    PartitionRegistration.merge; the partition epoch always moves
    RemoveTopicRecord               a topic deleted (its id is remembered: a partition directory
                                    still naming it is a deleted topic's, never a lost one)
    ConfigRecord                    one config of a resource (TOPIC 2, BROKER 4, GROUP 32, as
                                    ConfigResource.Type numbers them); value None removes it
    ClientQuotaRecord               one quota key of an entity ((type, name or None for the
                                    default) pairs), or its removal
    UserScramCredentialRecord       a user's credential for one SCRAM mechanism
    RemoveUserScramCredentialRecord its removal (kept: a `sasl.users` credential removed at runtime
                                    stays removed)
    ProducerIdsRecord               the next producer-id block's start (handed out before use)
    RegisterBrokerRecord            a broker (its id, epoch, rack, listeners) at its start
    FenceBrokerRecord /
    UnfenceBrokerRecord             a broker stopped (no leaderships, out of the ISRs) and back

The image is made of sections, each owning the records of one kind of metadata (`ImageSection`):
topics, configs, client quotas, SCRAM, producer ids, the cluster's brokers. `records()` writes the
image back as the records that rebuild it (a snapshot). Access control lists are the authorizer's
section, added beside these in a module of its own: its records (AccessControlEntryRecord,
RemoveAccessControlEntryRecord) register with `record_type`, and its `ImageSection` subclass with
`register_section`, at import; every image then has one (`image.section(AclsImage)`), and the log
replays and snapshots its records. Nothing here needs editing for it.

Records are encoded as JSON in the record values of v2 record batches (`encode_record`,
`decode_record`): {"type": "TopicRecord", "version": 0, <fields>}. Kafka writes its generated binary
form; the fields and their meaning are Kafka's, the encoding is readable with any tool.

No I/O, no clock, no trio.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Iterator, Mapping, Sequence, TypeVar, get_type_hints

__all__ = [
    "BROKER_RESOURCE", "GROUP_RESOURCE", "NO_LEADER", "TOPIC_RESOURCE",
    "BrokerRegistration", "ClientQuotaRecord", "ConfigRecord", "FenceBrokerRecord", "ImageSection",
    "MetadataImage", "MetadataRecord", "PartitionChangeRecord", "PartitionRecord", "PartitionRegistration",
    "ProducerIdsRecord", "RECORD_TYPES", "RegisterBrokerRecord", "RemoveTopicRecord",
    "RemoveUserScramCredentialRecord", "ScramCredentialData", "TopicImage", "TopicRecord",
    "UnfenceBrokerRecord", "UserScramCredentialRecord", "decode_record", "encode_record", "record_type",
    "register_section",
]

# ConfigResource.Type
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
GROUP_RESOURCE = 32

NO_LEADER = -1  # Kafka's LeaderConstants.NO_LEADER
RECOVERED, RECOVERING = 0, 1  # LeaderRecoveryState (KIP-704): RECOVERING after an unclean election

EntityPairs = tuple[tuple[str, "str | None"], ...]


# ---- records ---------------------------------------------------------------------------------------


class MetadataRecord:
    """A record of the metadata log. Subclasses are frozen dataclasses registered with
    `record_type`; `type_name` is Kafka's record name."""

    type_name: ClassVar[str] = ""
    version: ClassVar[int] = 0


RECORD_TYPES: dict[str, type[MetadataRecord]] = {}
R = TypeVar("R", bound=type[MetadataRecord])
T = TypeVar("T")


def record_type(cls: R) -> R:
    """Register a record class under its Kafka name (the class name)."""
    cls.type_name = cls.__name__
    if cls.type_name in RECORD_TYPES:
        raise ValueError(f"record type {cls.type_name} registered twice")
    RECORD_TYPES[cls.type_name] = cls
    return cls


@record_type
@dataclass(frozen=True, slots=True)
class TopicRecord(MetadataRecord):
    name: str
    topic_id: uuid.UUID


@record_type
@dataclass(frozen=True, slots=True)
class PartitionRecord(MetadataRecord):
    topic_id: uuid.UUID
    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = RECOVERED


@record_type
@dataclass(frozen=True, slots=True)
class PartitionChangeRecord(MetadataRecord):
    """Only the fields given change (None: unchanged)."""

    topic_id: uuid.UUID
    partition_id: int
    isr: tuple[int, ...] | None = None
    leader: int | None = None
    replicas: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None
    leader_recovery_state: int | None = None


@record_type
@dataclass(frozen=True, slots=True)
class RemoveTopicRecord(MetadataRecord):
    topic_id: uuid.UUID


@record_type
@dataclass(frozen=True, slots=True)
class ConfigRecord(MetadataRecord):
    resource_type: int
    resource_name: str
    name: str
    value: str | None  # None: the config is removed


@record_type
@dataclass(frozen=True, slots=True)
class ClientQuotaRecord(MetadataRecord):
    entity: tuple[tuple[str, str | None], ...]  # (entity type, name or None for the default)
    key: str
    value: float = 0.0
    remove: bool = False


@record_type
@dataclass(frozen=True, slots=True)
class UserScramCredentialRecord(MetadataRecord):
    name: str
    mechanism: int  # 1 SCRAM-SHA-256, 2 SCRAM-SHA-512 (Kafka's ScramMechanism types)
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@record_type
@dataclass(frozen=True, slots=True)
class RemoveUserScramCredentialRecord(MetadataRecord):
    name: str
    mechanism: int


@record_type
@dataclass(frozen=True, slots=True)
class ProducerIdsRecord(MetadataRecord):
    broker_id: int
    broker_epoch: int
    next_producer_id: int  # the start of the next block to hand out


@record_type
@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord(MetadataRecord):
    broker_id: int
    broker_epoch: int
    rack: str | None = None
    fenced: bool = False
    listeners: tuple[tuple[str, str, int], ...] = ()  # (name, host, port) as advertised


@record_type
@dataclass(frozen=True, slots=True)
class FenceBrokerRecord(MetadataRecord):
    broker_id: int
    epoch: int


@record_type
@dataclass(frozen=True, slots=True)
class UnfenceBrokerRecord(MetadataRecord):
    broker_id: int
    epoch: int


# ---- the JSON codec ------------------------------------------------------------------------------------


def _encode_value(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    if isinstance(value, tuple):
        return [_encode_value(v) for v in value]
    return value


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = {f.name: get_type_hints(cls)[f.name] for f in dataclasses.fields(cls)}
    return hints


def _decode_value(hint: Any, value: Any) -> Any:
    """`value` read from JSON as the type `hint` names (ValueError when it is not one)."""
    args: tuple[Any, ...] = getattr(hint, "__args__", ())
    origin = getattr(hint, "__origin__", None)
    if type(None) in args:  # X | None
        if value is None:
            return None
        hint = next(a for a in args if a is not type(None))
        return _decode_value(hint, value)
    if hint is uuid.UUID:
        return uuid.UUID(value)
    if hint is bytes:
        return base64.b64decode(value, validate=True)
    if hint is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{value!r} is not a boolean")
        return value
    if hint is int:
        if type(value) is not int:
            raise ValueError(f"{value!r} is not an integer")
        return value
    if hint is float:
        if type(value) not in (int, float):
            raise ValueError(f"{value!r} is not a number")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ValueError(f"{value!r} is not a string")
        return value
    if origin is tuple:
        if not isinstance(value, list):
            raise ValueError(f"{value!r} is not a list")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode_value(args[0], v) for v in value)
        if len(value) != len(args):
            raise ValueError(f"{value!r} does not have {len(args)} items")
        return tuple(_decode_value(a, v) for a, v in zip(args, value))
    raise ValueError(f"cannot read a {hint!r}")


def encode_record(record: MetadataRecord) -> bytes:
    doc = {"type": record.type_name, "version": record.version}
    for f in dataclasses.fields(record):  # type: ignore[arg-type]
        doc[f.name] = _encode_value(getattr(record, f.name))
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_record(data: bytes | memoryview) -> MetadataRecord:
    """The record `data` encodes; ValueError (saying what is wrong) when it is not one."""
    try:
        doc = json.loads(bytes(data))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a metadata record ({exc})") from None
    if not isinstance(doc, dict):
        raise ValueError("not a metadata record (not a JSON object)")
    cls = RECORD_TYPES.get(doc.get("type"))  # type: ignore[arg-type]
    if cls is None:
        raise ValueError(f"unknown metadata record type {doc.get('type')!r}")
    if doc.get("version") != cls.version:
        raise ValueError(f"{cls.type_name} version {doc.get('version')!r} is not {cls.version}")
    kwargs = {}
    for name, hint in _hints(cls).items():
        if name in doc:
            try:
                kwargs[name] = _decode_value(hint, doc[name])
            except (ValueError, TypeError, AttributeError) as exc:
                raise ValueError(f"{cls.type_name}.{name}: {exc}") from None
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ValueError(f"{cls.type_name}: {exc}") from None


# ---- the image ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """One partition as the controller has it (Kafka's PartitionRegistration)."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = RECOVERED

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0] if self.replicas else NO_LEADER

    @property
    def has_preferred_leader(self) -> bool:
        return self.leader == self.preferred_leader

    @property
    def reassignment_in_progress(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    def merge(self, change: PartitionChangeRecord) -> PartitionRegistration:
        """This registration after `change` (Kafka's PartitionRegistration.merge): a leader given is
        a new leader epoch; every change is a new partition epoch."""
        leader, leader_epoch = self.leader, self.leader_epoch
        if change.leader is not None:
            leader, leader_epoch = change.leader, self.leader_epoch + 1
        return PartitionRegistration(
            replicas=self.replicas if change.replicas is None else change.replicas,
            isr=self.isr if change.isr is None else change.isr,
            leader=leader,
            leader_epoch=leader_epoch,
            partition_epoch=self.partition_epoch + 1,
            removing_replicas=self.removing_replicas if change.removing_replicas is None else change.removing_replicas,
            adding_replicas=self.adding_replicas if change.adding_replicas is None else change.adding_replicas,
            leader_recovery_state=(self.leader_recovery_state if change.leader_recovery_state is None
                                   else change.leader_recovery_state),
        )

    def record(self, topic_id: uuid.UUID, partition_id: int) -> PartitionRecord:
        return PartitionRecord(topic_id, partition_id, self.replicas, self.isr, self.leader, self.leader_epoch,
                               self.partition_epoch, self.removing_replicas, self.adding_replicas,
                               self.leader_recovery_state)


@dataclass(slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionRegistration] = field(default_factory=dict)

    @property
    def num_partitions(self) -> int:
        return len(self.partitions)


@dataclass(frozen=True, slots=True)
class ScramCredentialData:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    epoch: int
    rack: str | None
    fenced: bool
    listeners: tuple[tuple[str, str, int], ...] = ()


class ImageSection:
    """One kind of metadata in the image: the record types it applies (`handles`), how (`apply`),
    and the records that rebuild it (`records`, for a snapshot)."""

    handles: ClassVar[tuple[type[MetadataRecord], ...]] = ()

    def apply(self, record: MetadataRecord) -> None:
        raise NotImplementedError

    def records(self) -> Iterator[MetadataRecord]:
        raise NotImplementedError


class TopicsImage(ImageSection):
    """Topics by name and by id, and the ids of topics deleted."""

    handles = (TopicRecord, PartitionRecord, PartitionChangeRecord, RemoveTopicRecord)

    def __init__(self) -> None:
        self.by_name: dict[str, TopicImage] = {}
        self.by_id: dict[uuid.UUID, TopicImage] = {}
        self.deleted_ids: set[uuid.UUID] = set()

    def apply(self, record: MetadataRecord) -> None:
        if isinstance(record, PartitionChangeRecord):
            topic = self._topic(record.topic_id)
            current = topic.partitions.get(record.partition_id)
            if current is None:
                raise ValueError(f"PartitionChangeRecord for unknown partition {topic.name}-{record.partition_id}")
            topic.partitions[record.partition_id] = current.merge(record)
        elif isinstance(record, PartitionRecord):
            topic = self._topic(record.topic_id)
            topic.partitions[record.partition_id] = PartitionRegistration(
                record.replicas, record.isr, record.leader, record.leader_epoch, record.partition_epoch,
                record.removing_replicas, record.adding_replicas, record.leader_recovery_state)
        elif isinstance(record, TopicRecord):
            if record.name in self.by_name or record.topic_id in self.by_id:
                raise ValueError(f"TopicRecord for {record.name} ({record.topic_id}), which exists")
            topic = TopicImage(record.name, record.topic_id)
            self.by_name[record.name] = topic
            self.by_id[record.topic_id] = topic
            self.deleted_ids.discard(record.topic_id)
        elif isinstance(record, RemoveTopicRecord):
            topic = self._topic(record.topic_id)
            del self.by_name[topic.name]
            del self.by_id[topic.topic_id]
            self.deleted_ids.add(topic.topic_id)

    def _topic(self, topic_id: uuid.UUID) -> TopicImage:
        topic = self.by_id.get(topic_id)
        if topic is None:
            raise ValueError(f"no topic with id {topic_id}")
        return topic

    def records(self) -> Iterator[MetadataRecord]:
        for name in sorted(self.by_name):
            topic = self.by_name[name]
            yield TopicRecord(topic.name, topic.topic_id)
            for index in sorted(topic.partitions):
                yield topic.partitions[index].record(topic.topic_id, index)
        # The deleted ids, so that a snapshot remembers them too: a topic created and removed.
        for topic_id in sorted(self.deleted_ids):
            yield TopicRecord(_DELETED_NAME, topic_id)
            yield RemoveTopicRecord(topic_id)


_DELETED_NAME = ""  # a snapshot names a deleted topic it remembers so: never a legal topic name


class ConfigsImage(ImageSection):
    """(resource type, resource name) -> {config name: value}."""

    handles = (ConfigRecord,)

    def __init__(self) -> None:
        self.resources: dict[tuple[int, str], dict[str, str]] = {}

    def apply(self, record: MetadataRecord) -> None:
        assert isinstance(record, ConfigRecord)
        key = (record.resource_type, record.resource_name)
        if record.value is None:
            configs = self.resources.get(key)
            if configs is not None:
                configs.pop(record.name, None)
                if not configs:
                    del self.resources[key]
        else:
            self.resources.setdefault(key, {})[record.name] = record.value

    def get(self, resource_type: int, resource_name: str) -> dict[str, str]:
        """A copy of one resource's configs ({} when it has none)."""
        return dict(self.resources.get((resource_type, resource_name), {}))

    def names(self, resource_type: int) -> list[str]:
        return sorted(name for type_, name in self.resources if type_ == resource_type)

    def records(self) -> Iterator[MetadataRecord]:
        for (type_, name), configs in sorted(self.resources.items()):
            for key, value in sorted(configs.items()):
                yield ConfigRecord(type_, name, key, value)


class ClientQuotasImage(ImageSection):
    """entity pairs (sorted by type) -> {quota key: value}."""

    handles = (ClientQuotaRecord,)

    def __init__(self) -> None:
        self.entities: dict[EntityPairs, dict[str, float]] = {}

    def apply(self, record: MetadataRecord) -> None:
        assert isinstance(record, ClientQuotaRecord)
        entity = tuple(sorted(record.entity, key=lambda pair: pair[0]))
        if record.remove:
            quotas = self.entities.get(entity)
            if quotas is not None:
                quotas.pop(record.key, None)
                if not quotas:
                    del self.entities[entity]
        else:
            self.entities.setdefault(entity, {})[record.key] = record.value

    def records(self) -> Iterator[MetadataRecord]:
        for entity, quotas in sorted(self.entities.items(), key=lambda item: repr(item[0])):
            for key, value in sorted(quotas.items()):
                yield ClientQuotaRecord(entity, key, value)


class ScramImage(ImageSection):
    """(user, mechanism type) -> the credential, or None where one was removed."""

    handles = (UserScramCredentialRecord, RemoveUserScramCredentialRecord)

    def __init__(self) -> None:
        self.credentials: dict[tuple[str, int], ScramCredentialData | None] = {}

    def apply(self, record: MetadataRecord) -> None:
        if isinstance(record, UserScramCredentialRecord):
            self.credentials[(record.name, record.mechanism)] = ScramCredentialData(
                record.salt, record.stored_key, record.server_key, record.iterations)
        else:
            assert isinstance(record, RemoveUserScramCredentialRecord)
            self.credentials[(record.name, record.mechanism)] = None

    def records(self) -> Iterator[MetadataRecord]:
        for (user, mechanism), credential in sorted(self.credentials.items()):
            if credential is None:
                yield RemoveUserScramCredentialRecord(user, mechanism)
            else:
                yield UserScramCredentialRecord(user, mechanism, credential.salt, credential.stored_key,
                                                credential.server_key, credential.iterations)


class ProducerIdsImage(ImageSection):
    """The start of the next producer-id block (Kafka's ProducerIdsImage)."""

    handles = (ProducerIdsRecord,)

    def __init__(self) -> None:
        self.next_producer_id = 0
        self.last: ProducerIdsRecord | None = None

    def apply(self, record: MetadataRecord) -> None:
        assert isinstance(record, ProducerIdsRecord)
        if record.next_producer_id < self.next_producer_id:
            raise ValueError(f"ProducerIdsRecord moves the next producer id back, from {self.next_producer_id} "
                             f"to {record.next_producer_id}")
        self.next_producer_id = record.next_producer_id
        self.last = record

    def records(self) -> Iterator[MetadataRecord]:
        if self.last is not None:
            yield self.last


class ClusterImage(ImageSection):
    """The registered brokers (Kafka's ClusterImage)."""

    handles = (RegisterBrokerRecord, FenceBrokerRecord, UnfenceBrokerRecord)

    def __init__(self) -> None:
        self.brokers: dict[int, BrokerRegistration] = {}

    def apply(self, record: MetadataRecord) -> None:
        if isinstance(record, RegisterBrokerRecord):
            self.brokers[record.broker_id] = BrokerRegistration(record.broker_id, record.broker_epoch, record.rack,
                                                                record.fenced, record.listeners)
            return
        assert isinstance(record, (FenceBrokerRecord, UnfenceBrokerRecord))
        current = self.brokers.get(record.broker_id)
        if current is None:
            raise ValueError(f"{record.type_name} for broker {record.broker_id}, which is not registered")
        self.brokers[record.broker_id] = dataclasses.replace(current, fenced=isinstance(record, FenceBrokerRecord))

    def records(self) -> Iterator[MetadataRecord]:
        for broker_id in sorted(self.brokers):
            b = self.brokers[broker_id]
            yield RegisterBrokerRecord(b.broker_id, b.epoch, b.rack, b.fenced, b.listeners)

    def unfenced(self) -> list[int]:
        return sorted(b for b, reg in self.brokers.items() if not reg.fenced)


# Sections other modules add (the authorizer's ACLs): a new instance of each joins every image.
SECTION_TYPES: list[type[ImageSection]] = []
S = TypeVar("S", bound=type[ImageSection])


def register_section(cls: S) -> S:
    """Add a section type to every MetadataImage made from now on (module docstring)."""
    if cls not in SECTION_TYPES:
        SECTION_TYPES.append(cls)
    return cls


class MetadataImage:
    """The whole of the cluster's metadata (module docstring): its sections by name, and `apply`."""

    def __init__(self, extra_sections: Sequence[ImageSection] = ()) -> None:
        self.topics = TopicsImage()
        self.configs = ConfigsImage()
        self.client_quotas = ClientQuotasImage()
        self.scram = ScramImage()
        self.producer_ids = ProducerIdsImage()
        self.cluster = ClusterImage()
        self.sections: list[ImageSection] = [self.cluster, self.topics, self.configs, self.client_quotas,
                                             self.scram, self.producer_ids,
                                             *(cls() for cls in SECTION_TYPES), *extra_sections]
        self._by_type: dict[type[MetadataRecord], ImageSection] = {}
        for section in self.sections:
            for cls in section.handles:
                if cls in self._by_type:
                    raise ValueError(f"{cls.type_name} is applied by two sections")
                self._by_type[cls] = section
        self.offset = -1  # the offset of the last record applied (-1: none)

    def section(self, cls: type[T]) -> T:
        """The image's section of a type (a registered one: `register_section`)."""
        for section in self.sections:
            if isinstance(section, cls):
                return section
        raise KeyError(f"no {cls.__name__} section in the image")

    def apply(self, record: MetadataRecord) -> None:
        """Apply one record; ValueError when it does not fit the image (damage, or a bug)."""
        section = self._by_type.get(type(record))
        if section is None:
            raise ValueError(f"no section of the image applies {record.type_name}")
        section.apply(record)

    def apply_all(self, records: Iterable[MetadataRecord]) -> None:
        for record in records:
            self.apply(record)

    def records(self) -> Iterator[MetadataRecord]:
        """The records that rebuild this image from nothing (a snapshot's content)."""
        for section in self.sections:
            yield from section.records()

    # -- conveniences ------------------------------------------------------------------------------------

    def topic(self, name: str) -> TopicImage | None:
        return self.topics.by_name.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        return self.topics.by_id.get(topic_id)

    def partition(self, topic: str, partition: int) -> PartitionRegistration | None:
        image = self.topics.by_name.get(topic)
        return None if image is None else image.partitions.get(partition)

    def topic_configs(self, name: str) -> dict[str, str]:
        return self.configs.get(TOPIC_RESOURCE, name)


def replay(records: Iterable[MetadataRecord], image: MetadataImage | None = None) -> MetadataImage:
    """An image built from `records` (on `image`, a new one by default)."""
    image = image if image is not None else MetadataImage()
    image.apply_all(records)
    return image


Publisher = Callable[[Sequence[MetadataRecord]], None]


def topic_config_records(name: str, configs: Mapping[str, str]) -> list[ConfigRecord]:
    return [ConfigRecord(TOPIC_RESOURCE, name, key, value) for key, value in sorted(configs.items())]
