"""Who a request comes from, and what it may do: the broker's authentication stores and the one
place authorization sits (Kafka's AuthHelper, kfake's acl.go).

`AuthHelper` holds the SASL users (sasl.users, minibroker.sasl) and the SCRAM credentials created at
runtime (AlterUserScramCredentials, minibroker.scram_credentials), which SaslHandshake,
SaslAuthenticate and the SCRAM admin APIs use; and the broker's `Authorizer`, if it has one.

Authorization: a handler asks at the point it knows the resource, through its request context,
which knows the request's principal and listener (minibroker.context.RequestContext):

    ctx.authorize(operation, resource_type, name) -> bool
    ctx.filter_authorized(operation, resource_type, names) -> the names allowed, in order
    ctx.authorized_operations(resource_type, name) -> the bit set of allowed operations

`authorized_operations` is what Metadata (topics, the cluster), DescribeTopicPartitions,
DescribeCluster, DescribeGroups and ConsumerGroupDescribe answer when asked for authorized
operations (KIP-430): of the operations Kafka supports on that resource type (SUPPORTED_OPERATIONS),
those the authorizer allows, one bit per AclOperation code. With no authorizer everything is allowed
(Kafka's AuthHelper without an authorizer): every supported operation. Operation and resource type
codes are Kafka's (AclOperation, ResourceType).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Protocol, cast

if TYPE_CHECKING:
    from minibroker.sasl import UserStore
    from minibroker.scram_credentials import ScramCredentialStore

__all__ = ["CLUSTER_RESOURCE", "NO_AUTHORIZED_OPERATIONS", "SUPPORTED_OPERATIONS", "AclOperation", "AuthHelper",
           "Authorizer", "ResourceType", "Session"]


class AclOperation(enum.IntEnum):
    """Kafka's AclOperation codes (the bit of an operation in an authorized-operations set)."""

    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class ResourceType(enum.IntEnum):
    """Kafka's ResourceType codes."""

    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


# The authorized-operations field when the client did not ask for it (Kafka's Integer.MIN_VALUE).
NO_AUTHORIZED_OPERATIONS = -2147483648
CLUSTER_RESOURCE = "kafka-cluster"  # the name of the one CLUSTER resource (Kafka's)

_ = AclOperation
# What authorized_operations reports on, per resource type (Kafka's AclEntry.supportedOperations):
# the group's with DESCRIBE_CONFIGS and ALTER_CONFIGS since Kafka 4's group configs (KIP-848), the
# transactional id's with TWO_PHASE_COMMIT (KIP-939).
SUPPORTED_OPERATIONS: Mapping[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (_.READ, _.WRITE, _.CREATE, _.DELETE, _.ALTER, _.DESCRIBE, _.DESCRIBE_CONFIGS,
                         _.ALTER_CONFIGS),
    ResourceType.CLUSTER: (_.CREATE, _.ALTER, _.DESCRIBE, _.CLUSTER_ACTION, _.DESCRIBE_CONFIGS, _.ALTER_CONFIGS,
                           _.IDEMPOTENT_WRITE),
    ResourceType.GROUP: (_.READ, _.DELETE, _.DESCRIBE, _.DESCRIBE_CONFIGS, _.ALTER_CONFIGS),
    ResourceType.TRANSACTIONAL_ID: (_.DESCRIBE, _.WRITE, _.TWO_PHASE_COMMIT),
    ResourceType.DELEGATION_TOKEN: (_.DESCRIBE,),
    ResourceType.USER: (_.CREATE_TOKENS, _.DESCRIBE_TOKENS),
}
_ALL_SUPPORTED = {kind: sum(1 << op for op in ops) for kind, ops in SUPPORTED_OPERATIONS.items()}


class Session(Protocol):
    """Who is asking, and where from: a connection (minibroker.context.Connection is one)."""

    @property
    def principal(self) -> str: ...

    @property
    def listener(self) -> str: ...

    @property
    def peer(self) -> str: ...  # "host:port"


class Authorizer(Protocol):
    """Decides one action (Kafka's Authorizer.authorize): may `principal` ("User:alice"), connected
    on `listener` from `host`, perform `operation` on the resource? An authorizer that takes a
    `log_if_denied` keyword is told False when the answer only computes authorized operations or
    filters a list (Kafka's Action.logIfDenied).
    minibroker.acls.StandardAuthorizer is Kafka's; `authorizer.class.name` may name another class
    (package.module:Class, built with the broker's properties), which may also define
    `authorize_by_resource_type(principal, listener, host, operation, resource_type)`."""

    def authorize(self, principal: str, listener: str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool: ...


class AuthHelper:
    def __init__(self, sasl_users: UserStore, scram_credentials: ScramCredentialStore,
                 authorizer: Authorizer | None = None) -> None:
        """`authorizer`: None allows everything."""
        self.sasl_users = sasl_users
        self.scram_credentials = scram_credentials
        self.authorizer = authorizer
        # An authorizer of the six-argument form is not told whether a denial is to be logged.
        self._log_flag = authorizer is not None and _takes_log_flag(authorizer.authorize)

    def authorize(self, connection: Session, operation: AclOperation, resource_type: ResourceType,
                  name: str, log_if_denied: bool = True) -> bool:
        if self.authorizer is None:
            return True
        if getattr(connection, "inter_broker", False):
            # Another broker of the cluster, in process (a follower's fetches): trusted as Kafka's
            # inter-broker principal is when it is a super user, the usual setup.
            return True
        if self._log_flag:
            return cast(Any, self.authorizer).authorize(connection.principal, connection.listener, _host(connection), operation,
                                             resource_type, name, log_if_denied=log_if_denied)
        return self.authorizer.authorize(connection.principal, connection.listener, _host(connection), operation,
                                         resource_type, name)

    def filter_authorized(self, connection: Session, operation: AclOperation, resource_type: ResourceType,
                          names: Iterable[str], log_if_denied: bool = True) -> list[str]:
        """The names the operation is allowed on, in their order (Kafka's filterByAuthorized)."""
        if self.authorizer is None:
            return list(names)
        allowed: dict[str, bool] = {}
        out = []
        for name in names:
            ok = allowed.get(name)
            if ok is None:
                ok = allowed[name] = self.authorize(connection, operation, resource_type, name, log_if_denied)
            if ok:
                out.append(name)
        return out

    def authorized_operations(self, connection: Session, resource_type: ResourceType, name: str) -> int:
        """The bit set of the supported operations on the resource that are allowed (KIP-430)."""
        if self.authorizer is None:
            return _ALL_SUPPORTED[resource_type]
        return sum(1 << op for op in SUPPORTED_OPERATIONS[resource_type]
                   if self.authorize(connection, op, resource_type, name, log_if_denied=False))

    def authorize_by_resource_type(self, connection: Session, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """Whether the operation is allowed on some resource of the type (KIP-679; what InitProducerId
        asks for an idempotent producer without IDEMPOTENT_WRITE)."""
        if self.authorizer is None:
            return True
        by_type = getattr(self.authorizer, "authorize_by_resource_type", None)
        if by_type is None:
            return self.authorize(connection, operation, resource_type, "hardcode", log_if_denied=False)
        return by_type(connection.principal, connection.listener, _host(connection), operation, resource_type)


def _takes_log_flag(authorize) -> bool:
    import inspect

    try:
        parameters = inspect.signature(authorize).parameters
    except (TypeError, ValueError):
        return False
    return "log_if_denied" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def _host(connection: Session) -> str:
    """The client's address without its port (the peer is "host:port")."""
    return connection.peer.rpartition(":")[0] or connection.peer
