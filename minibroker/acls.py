"""ACLs and the authorizer that reads them: Kafka's StandardAuthorizer (KIP-801), AclBinding and its
filters, and where the bindings are kept.

An ACL binding is a resource pattern (resource type, name, pattern type LITERAL or PREFIXED; the
LITERAL name `*` matches every resource of the type) and an entry (principal `User:<name>` or
`User:*`, host or `*`, operation, permission ALLOW or DENY). Deciding one action (StandardAuthorizerData):

1. a super user (super.users) is allowed everything;
2. the ACLs whose pattern matches the resource are the resource's ACLs; of those whose principal
   (the action's or User:*), host (the client's address or *) and operation match, a DENY denies,
   else an ALLOW allows. An ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE, and an ALLOW
   of ALTER_CONFIGS also DESCRIBE_CONFIGS (the implied operations; a DENY implies nothing); ALL
   matches every operation;
3. with no ACL on the resource at all, allow.everyone.if.no.acl.found decides; with ACLs on it but
   none matching, the action is denied.

`authorize_by_resource_type` is Kafka's default Authorizer.authorizeByResourceType (KIP-679), which
InitProducerId asks for idempotent producers: allowed when some ALLOW for the operation on a resource
of the type is not wholly covered by a DENY.

Filters (DescribeAcls, DeleteAcls) match as Kafka's AclBindingFilter: ANY matches any resource type,
pattern type, operation or permission; a null name, principal or host any; pattern type MATCH matches
the patterns that would apply to the named resource (the literal name, the wildcard, prefixes of it).

Bindings are kept in the cluster metadata image (`MetadataAclStore`): each is an
AccessControlEntryRecord with its id in the metadata log, as in Kafka's KRaft mode, removed by a
RemoveAccessControlEntryRecord (minibroker.storage.acls_image), written and fsynced before CreateAcls
or DeleteAcls is answered, so they survive kill -9; the authorizer reads them from the image at start
and again after every change any broker of the cluster commits.

Denials are logged at INFO to the `minibroker.authorizer` logger (Kafka's kafka.authorizer.logger),
allowed actions at DEBUG; checks that only compute authorized operations or filter lists at DEBUG.
"""

from __future__ import annotations

import enum
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Protocol, Sequence

from minibroker.auth import AclOperation, ResourceType
from minibroker.storage.acls_image import AccessControlEntryRecord, AclsImage, RemoveAccessControlEntryRecord
from minibroker.storage.config import ConfigError

if TYPE_CHECKING:
    from minibroker.config import BrokerConfig
    from minibroker.metadata import BrokerMetadata
    from minibroker.storage.metadata_image import MetadataRecord

__all__ = ["AclBinding", "AclBindingFilter", "AclError", "AclStore", "MetadataAclStore", "PatternType",
           "PermissionType", "StandardAuthorizer", "WILDCARD"]

log = logging.getLogger(__name__)
audit_log = logging.getLogger("minibroker.authorizer")

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class PermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# Filters use these codes beside the concrete ones (Kafka's ResourceType.ANY, AclOperation.ANY, ALL).
RESOURCE_UNKNOWN, RESOURCE_ANY = 0, 1
OPERATION_UNKNOWN, OPERATION_ANY, OPERATION_ALL = 0, 1, 2

_IMPLIES_DESCRIBE = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                               AclOperation.ALTER})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})


def resource_type_name(code: int) -> str:
    return {RESOURCE_UNKNOWN: "UNKNOWN", RESOURCE_ANY: "ANY"}.get(code) or ResourceType(code).name


def operation_name(code: int) -> str:
    return {OPERATION_UNKNOWN: "UNKNOWN", OPERATION_ANY: "ANY", OPERATION_ALL: "ALL"}.get(code) or AclOperation(code).name


def known_codes(resource_type: int, pattern_type: int, operation: int, permission: int) -> bool:
    """Whether the codes are enum values other than UNKNOWN (Kafka maps any other code to UNKNOWN
    and its requests refuse to parse UNKNOWN in a binding to create)."""
    return (resource_type in _RESOURCE_CODES | {RESOURCE_ANY} and pattern_type in {1, 2, 3, 4}
            and operation in _OPERATION_CODES | {OPERATION_ANY} and permission in (1, 2, 3))


class AclError(Exception):
    """A binding or filter refused: Kafka's INVALID_REQUEST with its message."""


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: int  # ResourceType
    name: str
    pattern_type: int  # PatternType.LITERAL or PREFIXED
    principal: str  # "User:alice", "User:*"
    host: str  # an address or "*"
    operation: int  # AclOperation or ALL
    permission: int  # PermissionType.ALLOW or DENY

    def validate(self) -> None:
        """Kafka's AclControlManager.validateNewAcl and AclApis' checks (AclError)."""
        if self.resource_type in (RESOURCE_UNKNOWN, RESOURCE_ANY) or self.resource_type not in _RESOURCE_CODES:
            raise AclError(f"Invalid resourceType {_name(resource_type_name, self.resource_type)}")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise AclError(f"Invalid patternType {_name(lambda c: PatternType(c).name, self.pattern_type)}")
        if self.operation in (OPERATION_UNKNOWN, OPERATION_ANY) or self.operation not in _OPERATION_CODES:
            raise AclError(f"Invalid operation {_name(operation_name, self.operation)}")
        if self.permission not in (PermissionType.ALLOW, PermissionType.DENY):
            raise AclError(f"Invalid permissionType {_name(lambda c: PermissionType(c).name, self.permission)}")
        if self.resource_type == ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            raise AclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
        if not self.name:
            raise AclError("Invalid empty resource name")
        if ":" not in self.principal:
            raise AclError(f"Invalid principal {self.principal!r}: expected a string in format "
                           "principalType:principalName")

    def __str__(self) -> str:
        return (f"(pattern=ResourcePattern(resourceType={resource_type_name(self.resource_type)}, name={self.name}, "
                f"patternType={PatternType(self.pattern_type).name}), entry=(principal={self.principal}, "
                f"host={self.host}, operation={operation_name(self.operation)}, "
                f"permissionType={PermissionType(self.permission).name}))")


def _name(naming, code: int) -> str:
    try:
        return naming(code)
    except ValueError:
        return "UNKNOWN"


_RESOURCE_CODES = frozenset(int(t) for t in ResourceType)
_OPERATION_CODES = frozenset({OPERATION_ALL, *(int(o) for o in AclOperation)})


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """A filter over bindings; None for name, principal and host matches any (AclBindingFilter)."""

    resource_type: int
    name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    @property
    def unknown(self) -> bool:
        return (self.resource_type == RESOURCE_UNKNOWN or self.pattern_type == PatternType.UNKNOWN
                or self.operation == OPERATION_UNKNOWN or self.permission == PermissionType.UNKNOWN)

    def matches(self, binding: AclBinding) -> bool:
        return self._pattern_matches(binding) and self._entry_matches(binding)

    def _pattern_matches(self, binding: AclBinding) -> bool:
        """ResourcePatternFilter.matches."""
        if self.resource_type != RESOURCE_ANY and self.resource_type != binding.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != binding.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type == PatternType.ANY or self.pattern_type == binding.pattern_type:
            return self.name == binding.name
        if binding.pattern_type == PatternType.LITERAL:
            return self.name == binding.name or binding.name == WILDCARD
        return self.name.startswith(binding.name)  # PREFIXED

    def _entry_matches(self, binding: AclBinding) -> bool:
        """AccessControlEntryFilter.matches."""
        if self.principal is not None and self.principal != binding.principal:
            return False
        if self.host is not None and self.host != binding.host:
            return False
        if self.operation != OPERATION_ANY and self.operation != binding.operation:
            return False
        return self.permission == PermissionType.ANY or self.permission == binding.permission


# ---- where bindings are kept ---------------------------------------------------------------------


class AclStore(Protocol):
    """Keeps the bindings across restarts: every change is durable when `save` returns, and an
    OSError from it changes nothing."""

    def load(self) -> dict[str, AclBinding]: ...

    def save(self, added: Mapping[str, AclBinding], removed: Iterable[str]) -> None:
        """The bindings `added` (by id) are new, the `removed` ids gone."""


class MemoryAclStore:
    """Bindings kept in memory only (an authorizer built in a test)."""

    def load(self) -> dict[str, AclBinding]:
        return {}

    def save(self, added: Mapping[str, AclBinding], removed: Iterable[str]) -> None:
        pass


class MetadataAclStore:
    """The ACL section of the cluster metadata image (minibroker.storage.acls_image): a change is
    committed to the metadata log as AccessControlEntryRecords and RemoveAccessControlEntryRecords
    (fsynced before CreateAcls or DeleteAcls is answered: they survive kill -9, and a snapshot keeps
    them), and every broker's authorizer follows the changes any broker commits (`follow`)."""

    def __init__(self, metadata: BrokerMetadata) -> None:
        self.metadata = metadata

    def load(self) -> dict[str, AclBinding]:
        out: dict[str, AclBinding] = {}
        for acl_id, record in self.metadata.image.section(AclsImage).acls.items():
            binding = AclBinding(record.resource_type, record.resource_name, record.pattern_type, record.principal,
                                 record.host, record.operation, record.permission_type)
            try:
                binding.validate()
            except AclError as exc:
                raise ValueError(f"the metadata log's ACL {acl_id} ({record}) is not a binding: {exc}") from None
            out[str(acl_id)] = binding
        return out

    def save(self, added: Mapping[str, AclBinding], removed: Iterable[str]) -> None:
        records: list[MetadataRecord] = [
            AccessControlEntryRecord(uuid.UUID(acl_id), b.resource_type, b.name, b.pattern_type, b.principal, b.host,
                                     b.operation, b.permission) for acl_id, b in added.items()]
        records += [RemoveAccessControlEntryRecord(uuid.UUID(acl_id)) for acl_id in removed]
        self.metadata.commit(records)

    def follow(self, changed: Callable[[], None]) -> None:
        """Call `changed()` after every commit (this broker's or another's) that adds or removes ACLs."""
        def on_metadata(records: Sequence[MetadataRecord]) -> None:
            if any(isinstance(r, (AccessControlEntryRecord, RemoveAccessControlEntryRecord)) for r in records):
                changed()

        self.metadata.subscribe(on_metadata)


# ---- the authorizer -------------------------------------------------------------------------------


class StandardAuthorizer:
    """Kafka's StandardAuthorizer over the bindings of an AclStore (module docstring)."""

    def __init__(self, store: AclStore | None = None, *, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.store: AclStore = store if store is not None else MemoryAclStore()
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_everyone_if_no_acl_found
        self._acls: dict[str, AclBinding] = dict(self.store.load())
        self._index()
        follow = getattr(self.store, "follow", None)
        if follow is not None:
            follow(self._reload)
        log.info("authorizer: %d ACL(s), super.users=%s, allow.everyone.if.no.acl.found=%s", len(self._acls),
                 ",".join(sorted(self.super_users)) or "none", str(self.allow_if_no_acl).lower())

    def _reload(self) -> None:
        """The store changed (a commit of this broker or another): read the bindings again."""
        self._acls = dict(self.store.load())
        self._index()

    def _index(self) -> None:
        """The bindings by resource type: literal names (the wildcard among them) and prefixes."""
        self._literal: dict[tuple[int, str], list[AclBinding]] = {}
        self._prefixed: dict[int, list[AclBinding]] = {}
        for binding in self._acls.values():
            if binding.pattern_type == PatternType.LITERAL:
                self._literal.setdefault((binding.resource_type, binding.name), []).append(binding)
            else:
                self._prefixed.setdefault(binding.resource_type, []).append(binding)
        self._decisions: dict[tuple, tuple[bool, AclBinding | str]] = {}

    # -- deciding --------------------------------------------------------------------------------

    def authorize(self, principal: str, listener: str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str, log_if_denied: bool = True) -> bool:
        key = (principal, host, operation, resource_type, name)
        decided = self._decisions.get(key)
        if decided is None:
            decided = self._decide(principal, host, operation, resource_type, name)
            if len(self._decisions) > 100_000:
                self._decisions.clear()
            self._decisions[key] = decided
        allowed, rule = decided
        if not allowed and log_if_denied:
            audit_log.info("Principal = %s is Denied operation = %s from host = %s on resource = %s:LITERAL:%s "
                           "based on rule %s", principal, operation.name, host, _type_name(resource_type), name, rule)
        elif audit_log.isEnabledFor(logging.DEBUG):
            audit_log.debug("Principal = %s is %s operation = %s from host = %s on resource = %s:LITERAL:%s based "
                            "on rule %s", principal, "Allowed" if allowed else "Denied", operation.name, host,
                            _type_name(resource_type), name, rule)
        return allowed

    def _decide(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                name: str) -> tuple[bool, AclBinding | str]:
        if principal in self.super_users:
            return True, "SuperUser"
        found_allow: AclBinding | None = None
        any_resource_acl = False
        for binding in self._resource_acls(resource_type, name):
            any_resource_acl = True
            result = _result(binding, principal, host, operation)
            if result is PermissionType.DENY:
                return False, binding
            if result is PermissionType.ALLOW:
                found_allow = binding
        if found_allow is not None:
            return True, found_allow
        if not any_resource_acl:
            return self.allow_if_no_acl, "DefaultAllow" if self.allow_if_no_acl else "DefaultDeny"
        return False, "DefaultDeny"

    def _resource_acls(self, resource_type: int, name: str) -> Iterable[AclBinding]:
        """The bindings whose pattern matches the resource: its literal name, the wildcard, prefixes."""
        yield from self._literal.get((resource_type, name), ())
        if name != WILDCARD:
            yield from self._literal.get((resource_type, WILDCARD), ())
        for binding in self._prefixed.get(resource_type, ()):
            if name.startswith(binding.name):
                yield binding

    def authorize_by_resource_type(self, principal: str, listener: str, host: str, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Kafka's Authorizer.authorizeByResourceType (KIP-679)."""
        if self.authorize(principal, listener, host, operation, resource_type, "hardcode", log_if_denied=False):
            return True
        deny: dict[int, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        allow: dict[int, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        wildcard_allow = False
        for binding in self._acls.values():
            if binding.resource_type != resource_type:
                continue
            if binding.host not in (host, WILDCARD) or binding.principal not in (principal, WILDCARD_PRINCIPAL):
                continue
            if binding.operation not in (operation, OPERATION_ALL):
                continue
            if binding.permission == PermissionType.DENY:
                if binding.pattern_type == PatternType.LITERAL and binding.name == WILDCARD:
                    return False
                deny[binding.pattern_type].add(binding.name)
                continue
            if binding.pattern_type == PatternType.LITERAL and binding.name == WILDCARD:
                wildcard_allow = True
                continue
            allow[binding.pattern_type].add(binding.name)
        if wildcard_allow:
            return True
        for pattern_type, names in allow.items():
            for name in names:
                if pattern_type == PatternType.LITERAL and name in deny[PatternType.LITERAL]:
                    continue
                if not any(name[:end] in deny[PatternType.PREFIXED] for end in range(1, len(name) + 1)):
                    return True
        return False

    # -- the bindings ----------------------------------------------------------------------------

    def acls(self, filter_: AclBindingFilter) -> list[AclBinding]:
        return [binding for binding in self._acls.values() if filter_.matches(binding)]

    def create_acls(self, bindings: list[AclBinding]) -> list[str | None]:
        """Add bindings (one already there is not added twice); per binding None, or Kafka's
        INVALID_REQUEST message. Durable when it returns; an OSError from the store changes nothing."""
        results: list[str | None] = []
        existing = set(self._acls.values())
        added: dict[str, AclBinding] = {}
        for binding in bindings:
            try:
                binding.validate()
            except AclError as exc:
                results.append(str(exc))
                continue
            if binding not in existing:
                added[str(uuid.uuid4())] = binding
                existing.add(binding)
            results.append(None)
        if added:
            self._commit(added, ())
            for binding in added.values():
                log.info("added ACL %s", binding)
        return results

    def delete_acls(self, filters: list[AclBindingFilter]) -> list[tuple[str | None, list[AclBinding]]]:
        """Remove what each filter matches: per filter (INVALID_REQUEST message or None, the bindings
        removed). Durable when it returns."""
        results: list[tuple[str | None, list[AclBinding]]] = []
        removed: dict[str, AclBinding] = {}
        for filter_ in filters:
            if filter_.pattern_type == PatternType.UNKNOWN or filter_.resource_type == RESOURCE_UNKNOWN:
                results.append(("Unknown patternFilter.", []))
                continue
            if filter_.operation == OPERATION_UNKNOWN or filter_.permission == PermissionType.UNKNOWN:
                results.append(("Unknown entryFilter.", []))
                continue
            matched = [(acl_id, b) for acl_id, b in self._acls.items() if filter_.matches(b)]
            removed.update(matched)
            results.append((None, [b for _, b in matched]))
        if removed:
            self._commit({}, removed)
            for binding in removed.values():
                log.info("removed ACL %s", binding)
        return results

    def _commit(self, added: Mapping[str, AclBinding], removed: Iterable[str]) -> None:
        """Store the change first (on an OSError nothing changed), then decide with it."""
        gone = set(removed)
        self.store.save(added, gone)
        acls = {acl_id: b for acl_id, b in self._acls.items() if acl_id not in gone}
        acls.update(added)
        self._acls = acls
        self._index()

    def __len__(self) -> int:
        return len(self._acls)


def _type_name(resource_type: int) -> str:
    """Kafka's SecurityUtils.resourceTypeName: Topic, Group, Cluster, TransactionalId, ..."""
    return resource_type_name(resource_type).title().replace("_", "")


def _result(binding: AclBinding, principal: str, host: str, operation: AclOperation) -> PermissionType | None:
    """StandardAuthorizerData.findResult: what the binding says of the action, or None."""
    if binding.principal != principal and binding.principal != WILDCARD_PRINCIPAL:
        return None
    if binding.host != WILDCARD and binding.host != host:
        return None
    if binding.operation != OPERATION_ALL:
        if binding.permission == PermissionType.ALLOW:
            if operation == AclOperation.DESCRIBE:
                if binding.operation not in _IMPLIES_DESCRIBE:
                    return None
            elif operation == AclOperation.DESCRIBE_CONFIGS:
                if binding.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif binding.operation != operation:
                return None
        elif binding.operation != operation:
            return None
    return PermissionType(binding.permission)


# Kafka's class names for the authorizer (the ZooKeeper-era AclAuthorizer has the same semantics).
STANDARD_AUTHORIZER_CLASSES = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                               "kafka.security.authorizer.AclAuthorizer")


def build_authorizer(config: BrokerConfig, metadata: BrokerMetadata):
    """The authorizer `authorizer.class.name` names (None when empty): Kafka's StandardAuthorizer on
    the ACLs of the cluster metadata image, or a Python class (package.module:Class) built with no arguments and given
    the broker's properties by `configure(props)` when it has one (Kafka's Configurable)."""
    name = config["authorizer.class.name"]
    if not name:
        return None
    if name in STANDARD_AUTHORIZER_CLASSES:
        return StandardAuthorizer(MetadataAclStore(metadata), super_users=config["super.users"],
                                  allow_everyone_if_no_acl_found=config["allow.everyone.if.no.acl.found"])
    module_name, sep, class_name = name.partition(":")
    if not sep:
        raise ConfigError("authorizer.class.name", f"{name!r} is neither Kafka's StandardAuthorizer "
                          f"({STANDARD_AUTHORIZER_CLASSES[0]}) nor a Python class named package.module:Class")
    import importlib

    try:
        cls = getattr(importlib.import_module(module_name), class_name)
        authorizer = cls()
    except Exception as exc:  # an import error, a missing class, a constructor that failed
        raise ConfigError("authorizer.class.name", f"cannot load {name}: {exc!r}") from None
    if not callable(getattr(authorizer, "authorize", None)):
        raise ConfigError("authorizer.class.name", f"{name} has no authorize() method")
    if callable(getattr(authorizer, "configure", None)):
        authorizer.configure(config.effective_props())
    return authorizer
