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
from typing import TYPE_CHECKING, Iterable, Mapping, Protocol

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
# the group's with DESCRIBE_CONFIGS and ALTER_CONFIGS since Kafka 4's group configs (KIP-848).
SUPPORTED_OPERATIONS: Mapping[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (_.READ, _.WRITE, _.CREATE, _.DELETE, _.ALTER, _.DESCRIBE, _.DESCRIBE_CONFIGS,
                         _.ALTER_CONFIGS),
    ResourceType.CLUSTER: (_.CREATE, _.ALTER, _.DESCRIBE, _.CLUSTER_ACTION, _.DESCRIBE_CONFIGS, _.ALTER_CONFIGS,
                           _.IDEMPOTENT_WRITE),
    ResourceType.GROUP: (_.READ, _.DELETE, _.DESCRIBE, _.DESCRIBE_CONFIGS, _.ALTER_CONFIGS),
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
    on `listener` from `host`, perform `operation` on the resource?"""

    def authorize(self, principal: str, listener: str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool: ...


class AuthHelper:
    def __init__(self, sasl_users: UserStore, scram_credentials: ScramCredentialStore,
                 authorizer: Authorizer | None = None) -> None:
        """`authorizer`: None allows everything."""
        self.sasl_users = sasl_users
        self.scram_credentials = scram_credentials
        self.authorizer = authorizer

    def authorize(self, connection: Session, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        if self.authorizer is None:
            return True
        return self.authorizer.authorize(connection.principal, connection.listener, _host(connection), operation,
                                         resource_type, name)

    def filter_authorized(self, connection: Session, operation: AclOperation, resource_type: ResourceType,
                          names: Iterable[str]) -> list[str]:
        """The names the operation is allowed on, in their order (Kafka's filterByAuthorized)."""
        if self.authorizer is None:
            return list(names)
        return [name for name in names if self.authorize(connection, operation, resource_type, name)]

    def authorized_operations(self, connection: Session, resource_type: ResourceType, name: str) -> int:
        """The bit set of the supported operations on the resource that are allowed (KIP-430)."""
        if self.authorizer is None:
            return _ALL_SUPPORTED[resource_type]
        return sum(1 << op for op in SUPPORTED_OPERATIONS[resource_type]
                   if self.authorize(connection, op, resource_type, name))


def _host(connection: Session) -> str:
    """The client's address without its port (the peer is "host:port")."""
    return connection.peer.rpartition(":")[0] or connection.peer
