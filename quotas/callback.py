"""The client quota callback (KIP-257): which quota applies to a request, and its limit.

Kafka: ``clients/.../server/quota/ClientQuotaCallback.java``, ``ClientQuotaEntity.java``,
``ClientQuotaType.java`` and the ``DefaultQuotaCallback`` inside ``core/.../ClientQuotaManager.scala``.

A callback maps a request's (principal, client-id) to *metric tags*; clients with the same tags share
one sensor and so one quota. ``quota_limit`` maps tags to a limit (``None`` = unlimited).
``DefaultQuotaCallback`` implements Kafka's eight levels of <user, client-id> precedence. A custom
callback is named by ``client.quota.callback.class`` and loaded with ``load_callback``; it is told
the cluster (``quotas.cluster.Cluster``) at start and whenever topics or partitions change, and may
ask for every limit to be re-read (``update_cluster_metadata`` / ``quota_reset_required`` returning
True). Two documented examples built on this interface are in ``quotas/examples/``.

Names are the principal's and client's names as given (Kafka URL-encodes user names for its
ZooKeeper paths and tags; both sides here use the raw name, which compares the same).
"""

from __future__ import annotations

import abc
import enum
import importlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from minibroker.quotas.cluster import Cluster

__all__ = [
    "CALLBACK_CLASS_CONFIG",
    "CLIENT_ID",
    "ClientQuotaCallback",
    "ClientQuotaEntity",
    "DEFAULT",
    "DefaultQuotaCallback",
    "IP",
    "QuotaType",
    "USER",
    "load_callback",
]

USER: Final = "user"
CLIENT_ID: Final = "client-id"
IP: Final = "ip"

# Metric tag names (Kafka ClientQuotaManager.DefaultTags).
USER_TAG: Final = "user"
CLIENT_ID_TAG: Final = "client-id"

CALLBACK_CLASS_CONFIG: Final = "client.quota.callback.class"


class QuotaType(enum.Enum):
    """A client quota type: its metric group and the configuration key that sets it."""

    PRODUCE = ("Produce", "producer_byte_rate")
    FETCH = ("Fetch", "consumer_byte_rate")
    REQUEST = ("Request", "request_percentage")
    CONTROLLER_MUTATION = ("ControllerMutation", "controller_mutation_rate")

    def __init__(self, group: str, config_key: str) -> None:
        self.group = group
        self.config_key = config_key

    @classmethod
    def for_config_key(cls, key: str) -> QuotaType | None:
        """The quota type a configuration key sets, or ``None`` for other keys."""
        return _TYPE_BY_KEY.get(key)


_TYPE_BY_KEY: dict[str, QuotaType] = {t.config_key: t for t in QuotaType}


class _Default(enum.Enum):
    """The default entity of a type (protocol: a null entity name; ZooKeeper: ``<default>``). An
    enum of one member, so that type checkers narrow ``name is DEFAULT``."""

    DEFAULT = "DEFAULT"

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT: Final = _Default.DEFAULT

_TYPE_ORDER = {USER: 0, CLIENT_ID: 1, IP: 2}


@dataclass(frozen=True, slots=True)
class ClientQuotaEntity:
    """What a quota is set on: a set of (entity type, name) pairs, name ``None`` meaning the default.

    That is the protocol's form (AlterClientQuotas / DescribeClientQuotas ``EntityData``). ``entries``
    is kept in a canonical order (user, client-id, ip, then others by name) so equal entities compare
    and hash equal. The ``user`` / ``client_id`` / ``ip`` properties give the other view:
    a name, ``DEFAULT``, or ``None`` when the entity has no component of that type.
    """

    entries: tuple[tuple[str, str | None], ...]

    @classmethod
    def of(
        cls,
        *,
        user: str | _Default | None = None,
        client_id: str | _Default | None = None,
        ip: str | _Default | None = None,
    ) -> ClientQuotaEntity:
        """``of(user="alice", client_id=DEFAULT)`` is /config/users/alice/clients/<default>."""
        pairs = []
        for entity_type, name in ((USER, user), (CLIENT_ID, client_id), (IP, ip)):
            if name is not None:
                pairs.append((entity_type, None if name is DEFAULT else name))
        return cls(tuple(pairs))

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[str, str | None]]) -> ClientQuotaEntity:
        """From protocol (type, name-or-None) pairs; a type given twice is a ``ValueError``."""
        seen: dict[str, str | None] = {}
        for entity_type, name in pairs:
            if entity_type in seen:
                raise ValueError(f"duplicate entity type {entity_type!r}")
            seen[entity_type] = name
        return cls(tuple(sorted(seen.items(), key=_entry_sort_key)))

    def _get(self, entity_type: str) -> str | _Default | None:
        for t, name in self.entries:
            if t == entity_type:
                return DEFAULT if name is None else name
        return None

    @property
    def user(self) -> str | _Default | None:
        return self._get(USER)

    @property
    def client_id(self) -> str | _Default | None:
        return self._get(CLIENT_ID)

    @property
    def ip(self) -> str | _Default | None:
        return self._get(IP)

    @property
    def types(self) -> frozenset[str]:
        return frozenset(t for t, _ in self.entries)

    def as_dict(self) -> dict[str, str | None]:
        return dict(self.entries)

    def __str__(self) -> str:
        # Kafka's ClientQuotaEntity.toString, used in error messages.
        inner = ", ".join(f"{t}={'null' if n is None else n}" for t, n in self.entries)
        return f"ClientQuotaEntity(entries={{{inner}}})"


def _entry_sort_key(entry: tuple[str, str | None]) -> tuple[int, str]:
    return (_TYPE_ORDER.get(entry[0], len(_TYPE_ORDER)), entry[0])


class ClientQuotaCallback(abc.ABC):
    """KIP-257 ``ClientQuotaCallback``. One instance serves every quota type.

    The four abstract methods are the contract; the others have Kafka's obvious defaults.
    """

    def configure(self, configs: Mapping[str, Any]) -> None:
        """Receives the broker configuration once, after construction."""

    @abc.abstractmethod
    def quota_metric_tags(self, quota_type: QuotaType, principal: str, client_id: str) -> dict[str, str]:
        """Tags of the quota metric for this request; equal tags share one quota."""

    @abc.abstractmethod
    def quota_limit(self, quota_type: QuotaType, metric_tags: Mapping[str, str]) -> float | None:
        """The limit for the quota with these tags, or ``None`` for unlimited."""

    @abc.abstractmethod
    def update_quota(self, quota_type: QuotaType, entity: ClientQuotaEntity, new_value: float) -> None:
        """A quota was set (from AlterClientQuotas or the persisted store)."""

    @abc.abstractmethod
    def remove_quota(self, quota_type: QuotaType, entity: ClientQuotaEntity) -> None:
        """A quota was removed."""

    def quota_reset_required(self, quota_type: QuotaType) -> bool:
        """True when limits changed by other means, so every sensor's bound must be re-read."""
        return False

    def update_cluster_metadata(self, cluster: Cluster) -> bool:
        """The cluster's topics, partitions or leaders changed (and once at start): return True when
        quota limits may have changed because of it, and the broker re-reads every live quota's
        limit through `quota_limit` (Kafka: `updateQuotaMetricConfigs()` after UpdateMetadata)."""
        return False

    def close(self) -> None:
        """The broker is shutting down."""


_CALLBACK_METHODS = (
    "quota_metric_tags",
    "quota_limit",
    "update_quota",
    "remove_quota",
    "quota_reset_required",
    "update_cluster_metadata",
    "close",
)

# A name, DEFAULT, or None for "no component of this type": the three states of one entity part.
_Part = str | _Default | None


class DefaultQuotaCallback(ClientQuotaCallback):
    """Kafka's default: quotas on <user>, <client-id> or <user, client-id>, with defaults.

    Precedence, most specific first (the matched level decides the metric tags):

    ====  ===========================================  =============
    1     /config/users/<user>/clients/<client-id>      (user, client)
    2     /config/users/<user>/clients/<default>        (user, client)
    3     /config/users/<user>                          (user, "")
    4     /config/users/<default>/clients/<client-id>   (user, client)
    5     /config/users/<default>/clients/<default>     (user, client)
    6     /config/users/<default>                       (user, "")
    7     /config/clients/<client-id>                   ("", client)
    8     /config/clients/<default>                     ("", client)
    ====  ===========================================  =============

    ``quota_limit`` reads the tags back: both set -> levels 1, 2, 4, 5; only user -> 3, 6; only
    client -> 7, 8. Kafka's shortcut of fixed tags while a single level is in use is left out: the
    walk is a few dict probes and gives the same limits.
    """

    def __init__(self) -> None:
        # config key of the quota type -> {(user part, client part): limit}. Keyed by the string:
        # an enum member hashes in Python code, and this is probed on every request.
        self._quotas: dict[str, dict[tuple[_Part, _Part], float]] = {t.config_key: {} for t in QuotaType}

    @staticmethod
    def _key(entity: ClientQuotaEntity) -> tuple[_Part, _Part]:
        if not entity.types or not entity.types <= {USER, CLIENT_ID}:
            raise ValueError(f"not a user/client-id quota entity: {entity}")
        return (entity.user, entity.client_id)

    def update_quota(self, quota_type: QuotaType, entity: ClientQuotaEntity, new_value: float) -> None:
        self._quotas[quota_type.config_key][self._key(entity)] = new_value

    def remove_quota(self, quota_type: QuotaType, entity: ClientQuotaEntity) -> None:
        self._quotas[quota_type.config_key].pop(self._key(entity), None)

    def configured(self, quota_type: QuotaType, entity: ClientQuotaEntity) -> float | None:
        """The value set on exactly this entity (no precedence walk), ``None`` when none is."""
        return self._quotas[quota_type.config_key].get(self._key(entity))

    def quota_metric_tags(self, quota_type: QuotaType, principal: str, client_id: str) -> dict[str, str]:
        user_tag, client_tag = self.metric_tag_values(quota_type, principal, client_id)
        return {USER_TAG: user_tag, CLIENT_ID_TAG: client_tag}

    def metric_tag_values(self, quota_type: QuotaType, user: str, client_id: str) -> tuple[str, str]:
        """``quota_metric_tags`` as a (user, client-id) pair, without building the dict."""
        q = self._quotas[quota_type.config_key]
        if q:
            if (user, client_id) in q or (user, DEFAULT) in q:  # levels 1, 2
                return (user, client_id)
            if (user, None) in q:  # 3
                return (user, "")
            if (DEFAULT, client_id) in q or (DEFAULT, DEFAULT) in q:  # 4, 5
                return (user, client_id)
            if (DEFAULT, None) in q:  # 6
                return (user, "")
        return ("", client_id)  # 7, 8, or no quota at all

    def quota_limit(self, quota_type: QuotaType, metric_tags: Mapping[str, str]) -> float | None:
        user = metric_tags.get(USER_TAG)
        client_id = metric_tags.get(CLIENT_ID_TAG)
        if user is None or client_id is None:
            return None
        return self.limit_for_tag_values(quota_type, user, client_id)

    def limit_for_tag_values(self, quota_type: QuotaType, user: str, client_id: str) -> float | None:
        q = self._quotas[quota_type.config_key]
        if not q:
            return None
        keys: tuple[tuple[_Part, _Part], ...]
        if user and client_id:
            keys = ((user, client_id), (user, DEFAULT), (DEFAULT, client_id), (DEFAULT, DEFAULT))
        elif user:
            keys = ((user, None), (DEFAULT, None))
        elif client_id:
            keys = ((None, client_id), (None, DEFAULT))
        else:
            return None
        for key in keys:
            limit = q.get(key)
            if limit is not None:
                return limit
        return None


def load_callback(import_path: str) -> ClientQuotaCallback:
    """Instantiate the class named by ``client.quota.callback.class``.

    ``import_path`` is ``package.module:ClassName`` or ``package.module.ClassName``. The class is
    called with no arguments. It must subclass ``ClientQuotaCallback`` or define all of its methods.
    Any failure is a ``ValueError`` naming the configuration key.
    """

    def fail(reason: str) -> ValueError:
        return ValueError(f"{CALLBACK_CLASS_CONFIG}={import_path!r}: {reason}")

    if ":" in import_path:
        module_name, _, attr = import_path.partition(":")
    else:
        module_name, _, attr = import_path.rpartition(".")
    if not module_name or not attr:
        raise fail("expected 'package.module:ClassName' or 'package.module.ClassName'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise fail(f"cannot import module {module_name!r}: {exc!r}") from exc
    cls: Any = module
    for part in attr.split("."):
        try:
            cls = getattr(cls, part)
        except AttributeError as exc:
            raise fail(f"module {module_name!r} has no attribute {attr!r}") from exc
    if not isinstance(cls, type):
        raise fail(f"{attr!r} is not a class")
    missing = [m for m in _CALLBACK_METHODS if not callable(getattr(cls, m, None))]
    missing += sorted(getattr(cls, "__abstractmethods__", ()))
    if missing:
        raise fail(f"{cls.__qualname__} does not implement ClientQuotaCallback (missing {', '.join(missing)})")
    try:
        instance = cls()
    except Exception as exc:
        raise fail(f"cannot instantiate {cls.__qualname__}: {exc!r}") from exc
    return instance
