"""The client quota configuration store: AlterClientQuotas, DescribeClientQuotas, persistence.

Kafka (KRaft): ``metadata/.../controller/ClientQuotaControlManager.java`` (alter validation and its
error messages), ``metadata/.../image/ClientQuotasImage.java`` (describe matching),
``server-common/.../config/QuotaConfig.java`` (the keys and their types).

The store is plain data: entity -> {key: value}. It takes plain Python values (the handler converts
kio objects), returns error codes and messages, serializes to JSON for the shell to write, and
reports each applied change to ``on_change(entity, key, value_or_None)`` so the shell can forward it
to the quota managers (``ClientQuotaManager.apply_config_change``) and the producer-id quota.

Where this differs from Kafka, on purpose:

- ``producer_ids_rate`` (KIP-936, not in Kafka) is valid for a user and the user default only. It is
  a DOUBLE, as the KIP's QuotaConfigs defines it: new producer ids per
  ``producer.id.quota.window.size.seconds``, fractions allowed (minibroker.quotas.producer_id_quota says what
  a fraction means). Unlike Kafka's other doubles it must also be finite.
- An ``ip`` entity must be an IP literal (or the default): Kafka also accepts a host name it can
  resolve, which would need DNS, i.e. I/O.
- A NaN value is rejected (Kafka lets NaN through for double keys).
- A duplicate key is reported as "Duplicate quota key ..."; Kafka computes that message and then
  overwrites it with "Ignoring duplicate entity ..." (same error code).
- Results come in request order (Kafka's come from a HashMap).
"""

from __future__ import annotations

import enum
import ipaddress
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from minibroker.protocol.errors import ErrorCode
from minibroker.quotas.callback import CLIENT_ID, IP, USER, ClientQuotaEntity

__all__ = [
    "QUOTA_KEYS",
    "QuotaConfigStore",
    "QuotaKey",
    "ValueKind",
]

MATCH_EXACT: Final = 0
MATCH_DEFAULT: Final = 1
MATCH_SPECIFIED: Final = 2

EntityPairs = tuple[tuple[str, str | None], ...]
ChangeListener = Callable[[ClientQuotaEntity, str, "float | None"], None]


class ValueKind(enum.Enum):
    LONG = "LONG"
    INT = "INT"
    DOUBLE = "DOUBLE"


# Java compares against (double) MAX_VALUE; for a long that is 2**63.
_MAX_FOR_KIND = {ValueKind.LONG: float(2**63 - 1), ValueKind.INT: float(2**31 - 1)}
_KIND_ARTICLE = {ValueKind.LONG: "a LONG", ValueKind.INT: "an INT"}


@dataclass(frozen=True, slots=True)
class QuotaKey:
    """A quota configuration key: its value type and the entity type combinations it is set on."""

    kind: ValueKind
    entity_shapes: frozenset[frozenset[str]]
    finite: bool = False  # reject +inf too (Kafka lets it through for doubles)


_USER_OR_CLIENT = frozenset({frozenset({USER}), frozenset({CLIENT_ID}), frozenset({USER, CLIENT_ID})})
_IP_ONLY = frozenset({frozenset({IP})})
_USER_ONLY = frozenset({frozenset({USER})})

QUOTA_KEYS: dict[str, QuotaKey] = {
    "producer_byte_rate": QuotaKey(ValueKind.LONG, _USER_OR_CLIENT),
    "consumer_byte_rate": QuotaKey(ValueKind.LONG, _USER_OR_CLIENT),
    "request_percentage": QuotaKey(ValueKind.DOUBLE, _USER_OR_CLIENT),
    "controller_mutation_rate": QuotaKey(ValueKind.DOUBLE, _USER_OR_CLIENT),
    "connection_creation_rate": QuotaKey(ValueKind.INT, _IP_ONLY),
    # KIP-936, read by the producer-id quota: set on a user or the user default only; new producer
    # ids per producer.id.quota.window.size.seconds, a double as in the KIP's QuotaConfigs.
    "producer_ids_rate": QuotaKey(ValueKind.DOUBLE, _USER_ONLY, finite=True),
}

_ENTITY_TYPES = (USER, CLIENT_ID, IP)


class _Rejected(Exception):
    """Internal: one entity's alteration is invalid (INVALID_REQUEST with this message)."""


def _entity_str(pairs: Sequence[tuple[str, str | None]]) -> str:
    inner = ", ".join(f"{t}={'null' if n is None else n}" for t, n in pairs)
    return f"ClientQuotaEntity(entries={{{inner}}})"


def _validate_entity(pairs: Sequence[tuple[str, str | None]]) -> ClientQuotaEntity:
    """ClientQuotaControlManager.validateEntity, then configKeysForEntityType's combination checks."""
    if not pairs:
        raise _Rejected("Invalid empty client quota entity")
    seen: dict[str, str | None] = {}
    for entity_type, name in pairs:  # one pair per type: `alter` reads the entity as Kafka does
        if entity_type not in _ENTITY_TYPES:
            raise _Rejected(f"Unhandled client quota entity type: {entity_type}")
        seen[entity_type] = name
        if name is not None and not name:
            raise _Rejected(f"Empty {entity_type} not supported")
    if IP in seen:
        if USER in seen or CLIENT_ID in seen:
            # Kafka's message, missing space included.
            raise _Rejected("Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId")
        ip = seen[IP]
        if ip is not None:
            try:
                ipaddress.ip_address(ip)
            except ValueError:
                raise _Rejected(f"{ip} is not a valid IP or resolvable host.") from None
    return ClientQuotaEntity.from_pairs(pairs)


def _validate_key_value(shape: frozenset[str], key: str, value: float) -> None:
    """ClientQuotaControlManager.validateQuotaKeyValue, in its order."""
    quota_key = QUOTA_KEYS.get(key)
    if quota_key is None or shape not in quota_key.entity_shapes:
        raise _Rejected(f"Invalid configuration key {key}")
    if math.isnan(value):
        raise _Rejected(f"Quota {key} must be a number")
    if value <= 0.0:
        raise _Rejected(f"Quota {key} must be greater than 0")
    if quota_key.finite and math.isinf(value):
        raise _Rejected(f"Quota {key} must be a finite number")
    if quota_key.kind is ValueKind.DOUBLE:
        return
    if value > _MAX_FOR_KIND[quota_key.kind]:
        raise _Rejected(f"Proposed value for {key} is too large for {_KIND_ARTICLE[quota_key.kind]}.")
    if abs(value % 1.0) > 1e-6:
        raise _Rejected(f"{key} cannot be a fractional value.")


class QuotaConfigStore:
    """Configured client quotas, entity -> {key: value}; an entity with no key left is dropped."""

    def __init__(self, on_change: ChangeListener | None = None) -> None:
        self._quotas: dict[ClientQuotaEntity, dict[str, float]] = {}
        self.on_change = on_change

    # -- reading --------------------------------------------------------------------------------

    def quotas_for(self, entity: ClientQuotaEntity) -> Mapping[str, float]:
        return dict(self._quotas.get(entity, {}))

    def entities(self) -> Iterator[tuple[ClientQuotaEntity, dict[str, float]]]:
        for entity, quotas in self._quotas.items():
            yield entity, dict(quotas)

    def replay(self, listener: ChangeListener) -> None:
        """Tell ``listener`` every configured value, e.g. to prime the managers after ``from_json``."""
        for entity, quotas in self._quotas.items():
            for key, value in quotas.items():
                listener(entity, key, value)

    def __len__(self) -> int:
        return len(self._quotas)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, QuotaConfigStore) and self._quotas == other._quotas

    __hash__ = None  # type: ignore[assignment]

    # -- AlterClientQuotas ----------------------------------------------------------------------

    def alter(
        self,
        entries: Iterable[tuple[Iterable[tuple[str, str | None]], Iterable[tuple[str, float, bool]]]],
        validate_only: bool = False,
    ) -> list[tuple[EntityPairs, int, str | None]]:
        """Validate and (unless ``validate_only``) apply ``entries`` (see ``plan``)."""
        results, changes = self.plan(entries)
        if not validate_only:
            for entity, key, new_value in changes:
                self._apply(entity, key, new_value)
        return results

    def plan(
        self,
        entries: Iterable[tuple[Iterable[tuple[str, str | None]], Iterable[tuple[str, float, bool]]]],
    ) -> tuple[list[tuple[EntityPairs, int, str | None]], list[tuple[ClientQuotaEntity, str, float | None]]]:
        """Validate ``entries`` and work out the changes they make, without making them: each entry
        is ``(entity pairs (type, name or None for the default), ops (key, value, remove))``.

        Returns one ``(entity, error_code, error_message)`` per distinct entity, in request order, and
        the changes ``(entity, key, value or None to remove)``. An entity's changes apply all or none; other entities are unaffected by its errors. As in
        Kafka, an entity given twice gets "Ignoring duplicate entity" while its first occurrence,
        if valid, is still applied. Removing a key that is not set is a no-op, unknown key or not.
        An entity that names one type twice names it once, with the last name given: Kafka's
        AlterClientQuotasRequest.entries() reads an entity into a map of type to name, and answers
        the entity it read.
        """
        results: dict[frozenset[tuple[str, str | None]], tuple[EntityPairs, int, str | None]] = {}
        changes: list[tuple[ClientQuotaEntity, str, float | None]] = []
        for raw_entity, raw_ops in entries:
            pairs: EntityPairs = tuple(dict(raw_entity).items())
            ident = frozenset(pairs)
            alterations: dict[str, float | None] = {}
            duplicate_key: str | None = None
            for key, value, remove in raw_ops:
                if key in alterations:
                    duplicate_key = key
                else:
                    alterations[key] = None if remove else value
            if ident in results:
                results[ident] = (
                    results[ident][0], ErrorCode.invalid_request, f"Ignoring duplicate entity {_entity_str(pairs)}"
                )
                continue
            if duplicate_key is not None:
                results[ident] = (
                    pairs,
                    ErrorCode.invalid_request,
                    f"Duplicate quota key {duplicate_key} not updating quota for this entity {_entity_str(pairs)}",
                )
                continue
            try:
                entity_changes = self._entity_changes(pairs, alterations)
            except _Rejected as exc:
                results[ident] = (pairs, ErrorCode.invalid_request, str(exc))
                continue
            changes.extend(entity_changes)
            results[ident] = (pairs, ErrorCode.none, None)
        return list(results.values()), changes

    def set(self, entity: ClientQuotaEntity, key: str, value: float | None) -> None:
        """Set (None: remove) one configured value, telling ``on_change`` when it changes."""
        self._apply(entity, key, value)

    def _entity_changes(
        self, pairs: EntityPairs, alterations: Mapping[str, float | None]
    ) -> list[tuple[ClientQuotaEntity, str, float | None]]:
        entity = _validate_entity(pairs)
        shape = entity.types
        current = self._quotas.get(entity, {})
        out: list[tuple[ClientQuotaEntity, str, float | None]] = []
        for key, value in alterations.items():
            if value is None:
                if key in current:
                    out.append((entity, key, None))
                continue
            _validate_key_value(shape, key, value)
            if current.get(key) != value:
                out.append((entity, key, float(value)))
        return out

    def _apply(self, entity: ClientQuotaEntity, key: str, value: float | None) -> None:
        if value is None:
            quotas = self._quotas.get(entity)
            if quotas is None or quotas.pop(key, None) is None:
                return
            if not quotas:
                del self._quotas[entity]
        else:
            self._quotas.setdefault(entity, {})[key] = value
        if self.on_change is not None:
            self.on_change(entity, key, value)

    # -- DescribeClientQuotas -------------------------------------------------------------------

    def describe(
        self, components: Iterable[tuple[str, int, str | None]], strict: bool = False
    ) -> tuple[int, str | None, list[tuple[ClientQuotaEntity, dict[str, float]]]]:
        """Filter by ``(entity_type, match_type, match)`` components: match type 0 = this exact name
        (``match``), 1 = the default, 2 = any name. ``strict`` excludes entities with types the
        filter does not name. Returns ``(error_code, error_message, [(entity, {key: value})])``;
        errors are top-level, as in the protocol (ClientQuotasImage.describe)."""
        exact: dict[str, str | None] = {}
        any_name: set[str] = set()
        for entity_type, match_type, match in components:
            if not entity_type:
                return ErrorCode.invalid_request, "Invalid empty entity type.", []
            if entity_type in exact or entity_type in any_name:
                return (
                    ErrorCode.invalid_request,
                    f"Entity type {entity_type} cannot appear more than once in the filter.",
                    [],
                )
            if entity_type not in _ENTITY_TYPES:
                return ErrorCode.unsupported_version, f"Unsupported entity type {entity_type}", []
            if match_type == MATCH_EXACT:
                if match is None:
                    return ErrorCode.invalid_request, "Request specified MATCH_TYPE_EXACT, but set match string to null.", []
                exact[entity_type] = match
            elif match_type == MATCH_DEFAULT:
                if match is not None:
                    return (
                        ErrorCode.invalid_request,
                        "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.",
                        [],
                    )
                exact[entity_type] = None
            elif match_type == MATCH_SPECIFIED:
                if match is not None:
                    return (
                        ErrorCode.invalid_request,
                        "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.",
                        [],
                    )
                any_name.add(entity_type)
            else:
                return ErrorCode.invalid_request, f"Unknown match type {match_type}", []
        named = exact.keys() | any_name
        if IP in named and (USER in named or CLIENT_ID in named):
            return (
                ErrorCode.invalid_request,
                "Invalid entity filter component combination. IP filter component should not be "
                "used with user or clientId filter component.",
                [],
            )
        out = []
        for entity, quotas in self._quotas.items():
            names = entity.as_dict()
            if strict and len(names) != len(exact) + len(any_name):
                continue
            if all(t in names and names[t] == m for t, m in exact.items()) and all(t in names for t in any_name):
                out.append((entity, dict(quotas)))
        return ErrorCode.none, None, out

    # -- persistence ----------------------------------------------------------------------------

    def to_json(self) -> str:
        """A stable JSON document (sorted, so an unchanged store writes the same bytes)."""
        doc = {
            "version": 1,
            "entities": [
                {
                    "entity": [{"type": t, "name": n} for t, n in entity.entries],
                    "quotas": dict(sorted(quotas.items())),
                }
                for entity, quotas in sorted(self._quotas.items(), key=lambda item: _sort_key(item[0]))
            ],
        }
        return json.dumps(doc, indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes, on_change: ChangeListener | None = None) -> QuotaConfigStore:
        """Load what ``to_json`` wrote; ``ValueError`` on a malformed document. ``on_change`` is not
        called for the loaded values (use ``replay``)."""
        try:
            doc: Any = json.loads(text)
            if doc.get("version") != 1:
                raise ValueError(f"unsupported quota store version {doc.get('version')!r}")
            store = cls(on_change)
            for item in doc["entities"]:
                pairs = [(_str(e["type"]), _opt_str(e["name"])) for e in item["entity"]]
                entity = ClientQuotaEntity.from_pairs(pairs)
                quotas = {_str(k): _number(v) for k, v in item["quotas"].items()}
                if quotas:
                    store._quotas[entity] = quotas
            return store
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
            raise ValueError(f"malformed quota store: {exc!r}") from exc


def _sort_key(entity: ClientQuotaEntity) -> tuple[tuple[str, bool, str], ...]:
    return tuple((t, n is not None, n or "") for t, n in entity.entries)


def _str(x: object) -> str:
    if not isinstance(x, str):
        raise TypeError(f"expected a string, got {x!r}")
    return x


def _opt_str(x: object) -> str | None:
    return None if x is None else _str(x)


def _number(x: object) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"expected a number, got {x!r}")
    return float(x)
