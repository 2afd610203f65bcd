"""The authorizer on its own: Kafka's StandardAuthorizerTest and BaseAuthorizerTest cases (literal,
prefixed and wildcard patterns, DENY over ALLOW, the implied operations, ALL, hosts, principals,
super.users, allow.everyone.if.no.acl.found, authorizeByResourceType), AclBindingFilter matching, the
checks of a new binding, and the bindings kept in the cluster metadata log (across an unclean stop and
a snapshot, followed by every broker of a cluster)."""

from __future__ import annotations

import pytest

from minibroker.acls import (
    OPERATION_ALL,
    OPERATION_ANY,
    RESOURCE_ANY,
    AclBinding,
    AclBindingFilter,
    PatternType,
    PermissionType,
    StandardAuthorizer,
)
from minibroker.auth import AclOperation as Op
from minibroker.auth import ResourceType as Rt

LITERAL, PREFIXED, ANY_PATTERN, MATCH = PatternType.LITERAL, PatternType.PREFIXED, PatternType.ANY, PatternType.MATCH
ALLOW, DENY = PermissionType.ALLOW, PermissionType.DENY
TOPIC, GROUP = Rt.TOPIC, Rt.GROUP
LOCAL = "127.0.0.1"


def authorizer(*bindings, **options) -> StandardAuthorizer:
    auth = StandardAuthorizer(**options)
    assert auth.create_acls(list(bindings)) == [None] * len(bindings)
    return auth


def acl(kind, name, pattern, principal, operation, permission, host="*") -> AclBinding:
    return AclBinding(kind, name, pattern, principal, host, operation, permission)


def allowed(auth: StandardAuthorizer, user: str, operation, kind, name, host: str = LOCAL) -> bool:
    return auth.authorize(f"User:{user}", "PLAINTEXT", host, operation, kind, name)


def decisions(auth, user, actions, host=LOCAL):
    return [allowed(auth, user, op, kind, name, host) for op, kind, name in actions]


def foo_acl(operation, permission):  # StandardAuthorizerTest.newFooAcl
    return acl(TOPIC, "foo_", PREFIXED, "User:bob", operation, permission)


def test_the_implied_operations_and_that_a_deny_implies_nothing():
    for op in (Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert allowed(authorizer(foo_acl(op, ALLOW)), "bob", Op.DESCRIBE, TOPIC, "foo_bar")
    assert not allowed(authorizer(foo_acl(Op.CREATE, ALLOW)), "bob", Op.DESCRIBE, TOPIC, "foo_bar")
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):  # a DENY of READ does not deny DESCRIBE...
        auth = authorizer(foo_acl(op, DENY), foo_acl(Op.DESCRIBE, ALLOW))
        assert allowed(auth, "bob", Op.DESCRIBE, TOPIC, "foo_bar")
    assert not allowed(authorizer(foo_acl(Op.DESCRIBE, DENY), foo_acl(Op.READ, ALLOW)), "bob", Op.DESCRIBE, TOPIC,
                       "foo_bar")
    for op in (Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS):
        assert allowed(authorizer(foo_acl(op, ALLOW)), "bob", Op.DESCRIBE_CONFIGS, TOPIC, "foo_bar")
    assert not allowed(authorizer(foo_acl(Op.ALTER_CONFIGS, DENY)), "bob", Op.DESCRIBE_CONFIGS, TOPIC, "foo_bar")


def test_simple_authorizations():
    auth = authorizer(foo_acl(Op.READ, ALLOW), foo_acl(Op.WRITE, ALLOW),
                      acl(GROUP, "bar", LITERAL, "User:*", Op.DESCRIBE_CONFIGS, ALLOW),
                      acl(GROUP, "bar", LITERAL, "User:*", Op.ALTER_CONFIGS, ALLOW))
    assert allowed(auth, "bob", Op.READ, TOPIC, "foo_")
    assert allowed(auth, "fred", Op.ALTER_CONFIGS, GROUP, "bar")
    assert not allowed(auth, "fred", Op.READ, TOPIC, "foo_")


def test_deny_wins_also_with_operation_all():
    auth = authorizer(acl(TOPIC, "foo", LITERAL, "User:alice", OPERATION_ALL, DENY),
                      acl(TOPIC, "foo", PREFIXED, "User:alice", Op.READ, ALLOW),
                      acl(TOPIC, "foo", LITERAL, "User:*", OPERATION_ALL, DENY),
                      acl(TOPIC, "foo", PREFIXED, "User:*", Op.DESCRIBE, ALLOW))
    assert decisions(auth, "alice", [(Op.WRITE, TOPIC, "foo"), (Op.READ, TOPIC, "foo"), (Op.DESCRIBE, TOPIC, "foo"),
                                     (Op.READ, TOPIC, "foobar")]) == [False, False, False, True]
    assert decisions(auth, "bob", [(Op.DESCRIBE, TOPIC, "foo"), (Op.READ, TOPIC, "foo"), (Op.WRITE, TOPIC, "foo"),
                                   (Op.DESCRIBE, TOPIC, "foobaz"), (Op.READ, TOPIC, "foobaz")]) == \
        [False, False, False, True, False]


def test_operation_all_on_literal_and_prefixed_topics():
    auth = authorizer(acl(TOPIC, "foo", LITERAL, "User:*", OPERATION_ALL, ALLOW),
                      acl(TOPIC, "bar", PREFIXED, "User:alice", OPERATION_ALL, ALLOW),
                      acl(TOPIC, "baz", LITERAL, "User:bob", OPERATION_ALL, ALLOW))
    assert decisions(auth, "alice", [(Op.WRITE, TOPIC, "foo"), (Op.DESCRIBE_CONFIGS, TOPIC, "bar"),
                                     (Op.DESCRIBE, TOPIC, "baz")]) == [True, True, False]
    assert decisions(auth, "bob", [(Op.WRITE, TOPIC, "foo"), (Op.READ, TOPIC, "bar"),
                                   (Op.DESCRIBE, TOPIC, "baz")]) == [True, False, True]
    assert decisions(auth, "malory", [(Op.DESCRIBE, TOPIC, "foo"), (Op.WRITE, TOPIC, "bar"),
                                      (Op.READ, TOPIC, "baz")]) == [True, False, False]


def test_hosts():
    host1, host2 = "192.168.1.1", "192.168.1.2"
    auth = authorizer(acl(TOPIC, "foo", LITERAL, "User:alice", Op.READ, DENY, host=host1),
                      acl(TOPIC, "foo", LITERAL, "User:alice", Op.READ, ALLOW),
                      acl(TOPIC, "bar", LITERAL, "User:bob", Op.READ, ALLOW, host=host2),
                      acl(TOPIC, "bar", LITERAL, "User:*", Op.DESCRIBE, ALLOW, host=LOCAL))
    actions = [(Op.READ, TOPIC, "foo"), (Op.READ, TOPIC, "bar"), (Op.DESCRIBE, TOPIC, "bar")]
    assert decisions(auth, "alice", actions, LOCAL) == [True, False, True]
    assert decisions(auth, "alice", actions, host1) == [False, False, False]
    assert decisions(auth, "alice", actions, host2) == [True, False, False]
    assert decisions(auth, "bob", actions, LOCAL) == [False, False, True]
    assert decisions(auth, "bob", actions, host1) == [False, False, False]
    assert decisions(auth, "bob", actions, host2) == [False, True, True]


def test_prefixes():
    auth = authorizer(acl(TOPIC, "fooa", PREFIXED, "User:alice", OPERATION_ALL, ALLOW),
                      acl(TOPIC, "foobar", LITERAL, "User:bob", OPERATION_ALL, ALLOW),
                      acl(TOPIC, "f", PREFIXED, "User:bob", OPERATION_ALL, ALLOW))
    assert decisions(auth, "bob", [(Op.WRITE, TOPIC, "foobarr"), (Op.READ, TOPIC, "goobar"),
                                   (Op.READ, TOPIC, "fooa")]) == [True, False, True]
    assert decisions(auth, "alice", [(Op.DESCRIBE, TOPIC, "fooa"), (Op.WRITE, TOPIC, "bar"),
                                     (Op.READ, TOPIC, "baz")]) == [True, False, False]


def test_the_wildcard_resource_and_the_wildcard_principal():
    auth = authorizer(acl(TOPIC, "*", LITERAL, "User:*", Op.READ, ALLOW),
                      acl(TOPIC, "secret", LITERAL, "User:eve", Op.READ, DENY))
    assert allowed(auth, "anyone", Op.READ, TOPIC, "whatever")
    assert allowed(auth, "anyone", Op.READ, TOPIC, "secret")
    assert not allowed(auth, "eve", Op.READ, TOPIC, "secret")
    assert not allowed(auth, "anyone", Op.READ, GROUP, "whatever")  # another resource type


def test_super_users_and_allow_everyone_if_no_acl_found():
    auth = authorizer(acl(TOPIC, "topic1", LITERAL, "User:Alice", Op.READ, ALLOW),
                      super_users={"User:alice", "User:chris"}, allow_everyone_if_no_acl_found=True)
    assert not allowed(auth, "Bob", Op.READ, TOPIC, "topic1")  # ACLs on the resource, none for Bob
    assert allowed(auth, "Bob", Op.READ, TOPIC, "topic2")  # no ACL on the resource: everyone
    assert allowed(auth, "chris", Op.ALTER, Rt.CLUSTER, "kafka-cluster")
    closed = authorizer(acl(TOPIC, "topic1", LITERAL, "User:Alice", Op.READ, ALLOW))
    assert not allowed(closed, "Bob", Op.READ, TOPIC, "topic2")  # Kafka's default: denied
    denied_super = authorizer(acl(TOPIC, "t", LITERAL, "User:*", OPERATION_ALL, DENY), super_users={"User:root"})
    assert allowed(denied_super, "root", Op.WRITE, TOPIC, "t")  # a super user is never denied


# ---- authorizeByResourceType (KIP-679, BaseAuthorizerTest) -----------------------------------------


def by_type(auth, user, op, kind, host="192.168.1.1") -> bool:
    return auth.authorize_by_resource_type(f"User:{user}", "PLAINTEXT", host, op, kind)


def test_by_resource_type_add_and_remove():
    auth = StandardAuthorizer()
    allow = acl(TOPIC, "sb1", LITERAL, "User:user1", Op.READ, ALLOW, host="192.168.1.1")
    deny = acl(TOPIC, "sb1", LITERAL, "User:user1", Op.READ, DENY, host="192.168.1.1")
    assert not by_type(auth, "user1", Op.READ, TOPIC)
    auth.create_acls([allow])
    assert by_type(auth, "user1", Op.READ, TOPIC)
    auth.create_acls([deny])
    assert not by_type(auth, "user1", Op.READ, TOPIC)
    auth.delete_acls([AclBindingFilter(TOPIC, "sb1", LITERAL, None, None, Op.READ, DENY)])
    assert by_type(auth, "user1", Op.READ, TOPIC)
    auth.delete_acls([AclBindingFilter(RESOURCE_ANY, None, ANY_PATTERN, None, None, OPERATION_ANY, PermissionType.ANY)])
    assert not by_type(auth, "user1", Op.READ, TOPIC)


def test_by_resource_type_a_dominant_prefixed_deny():
    auth = StandardAuthorizer()

    def add(name, permission):
        auth.create_acls([acl(GROUP, name, PREFIXED, "User:user1", Op.READ, permission, host="192.168.1.1")])

    add("abcde", ALLOW)
    assert by_type(auth, "user1", Op.READ, GROUP)
    add("abcd", DENY)
    assert not by_type(auth, "user1", Op.READ, GROUP)
    add("abc", ALLOW)
    assert by_type(auth, "user1", Op.READ, GROUP)
    add("a", DENY)
    assert not by_type(auth, "user1", Op.READ, GROUP)
    add("ab", ALLOW)
    assert not by_type(auth, "user1", Op.READ, GROUP)


def test_by_resource_type_a_wildcard_deny_dominates():
    auth = StandardAuthorizer()

    def add(name, pattern, permission):
        auth.create_acls([acl(GROUP, name, pattern, "User:user1", Op.WRITE, permission, host="192.168.1.1")])

    add("hello", PREFIXED, ALLOW)
    assert by_type(auth, "user1", Op.WRITE, GROUP)
    add("*", LITERAL, DENY)
    assert not by_type(auth, "user1", Op.WRITE, GROUP)
    add("*", LITERAL, ALLOW)
    add("aloha", LITERAL, ALLOW)
    assert not by_type(auth, "user1", Op.WRITE, GROUP)


def test_by_resource_type_all_operation_host_principal_and_super_users():
    auth = StandardAuthorizer(super_users={"User:admin"})
    assert by_type(auth, "admin", Op.WRITE, TOPIC)
    auth.create_acls([acl(TOPIC, "t", LITERAL, "User:*", OPERATION_ALL, ALLOW, host="*")])
    assert by_type(auth, "anyone", Op.WRITE, TOPIC)
    auth.create_acls([acl(TOPIC, "t", LITERAL, "User:bob", Op.WRITE, DENY, host="10.0.0.1")])
    assert not by_type(auth, "bob", Op.WRITE, TOPIC, host="10.0.0.1")
    assert by_type(auth, "bob", Op.WRITE, TOPIC, host="10.0.0.2")


# ---- filters, validation, the file ------------------------------------------------------------------


def everything() -> AclBindingFilter:
    return AclBindingFilter(RESOURCE_ANY, None, ANY_PATTERN, None, None, OPERATION_ANY, PermissionType.ANY)


def test_filters_match_as_kafkas_acl_binding_filter():
    bindings = [acl(TOPIC, "foo", LITERAL, "User:alice", Op.READ, ALLOW),
                acl(TOPIC, "*", LITERAL, "User:bob", Op.WRITE, ALLOW),
                acl(TOPIC, "fo", PREFIXED, "User:carol", Op.DESCRIBE, DENY),
                acl(GROUP, "foo", LITERAL, "User:alice", Op.READ, ALLOW)]
    auth = authorizer(*bindings)

    def names(resource_type, name, pattern, principal=None, operation=OPERATION_ANY, permission=PermissionType.ANY):
        return [(b.resource_type, b.name, b.pattern_type) for b in auth.acls(
            AclBindingFilter(resource_type, name, pattern, principal, None, operation, permission))]

    assert len(auth.acls(everything())) == 4
    assert names(TOPIC, None, ANY_PATTERN) == [(TOPIC, "foo", LITERAL), (TOPIC, "*", LITERAL), (TOPIC, "fo", PREFIXED)]
    # ANY: exactly the name; MATCH: every pattern that applies to it; a pattern type: that one.
    assert names(TOPIC, "foo", ANY_PATTERN) == [(TOPIC, "foo", LITERAL)]
    assert names(TOPIC, "foo", MATCH) == [(TOPIC, "foo", LITERAL), (TOPIC, "*", LITERAL), (TOPIC, "fo", PREFIXED)]
    assert names(TOPIC, "fo", PREFIXED) == [(TOPIC, "fo", PREFIXED)]
    assert names(RESOURCE_ANY, "foo", LITERAL) == [(TOPIC, "foo", LITERAL), (GROUP, "foo", LITERAL)]
    assert names(RESOURCE_ANY, None, ANY_PATTERN, principal="User:alice") == [(TOPIC, "foo", LITERAL),
                                                                           (GROUP, "foo", LITERAL)]
    assert names(RESOURCE_ANY, None, ANY_PATTERN, permission=DENY) == [(TOPIC, "fo", PREFIXED)]


@pytest.mark.parametrize("binding, message", [
    (acl(RESOURCE_ANY, "x", LITERAL, "User:a", Op.READ, ALLOW), "Invalid resourceType ANY"),
    (acl(TOPIC, "x", MATCH, "User:a", Op.READ, ALLOW), "Invalid patternType MATCH"),
    (acl(TOPIC, "x", ANY_PATTERN, "User:a", Op.READ, ALLOW), "Invalid patternType ANY"),
    (acl(TOPIC, "x", LITERAL, "User:a", OPERATION_ANY, ALLOW), "Invalid operation ANY"),
    (acl(TOPIC, "x", LITERAL, "User:a", Op.READ, PermissionType.ANY), "Invalid permissionType ANY"),
    (acl(TOPIC, "", LITERAL, "User:a", Op.READ, ALLOW), "Invalid empty resource name"),
    (acl(Rt.CLUSTER, "other", LITERAL, "User:a", Op.ALTER, ALLOW),
     "The only valid name for the CLUSTER resource is kafka-cluster"),
    (acl(TOPIC, "x", LITERAL, "alice", Op.READ, ALLOW), "Invalid principal 'alice'"),
])
def test_a_binding_that_cannot_be_is_refused_with_kafkas_message(binding, message):
    auth = StandardAuthorizer()
    [error] = auth.create_acls([binding])
    assert error is not None and error.startswith(message)
    assert len(auth) == 0


def test_a_binding_created_twice_is_kept_once():
    auth = authorizer(acl(TOPIC, "t", LITERAL, "User:a", Op.READ, ALLOW))
    assert auth.create_acls([acl(TOPIC, "t", LITERAL, "User:a", Op.READ, ALLOW)]) == [None]
    assert len(auth) == 1


def test_a_delete_reports_what_each_filter_removed():
    bindings = [acl(TOPIC, "t", LITERAL, "User:a", Op.READ, ALLOW), acl(TOPIC, "t", LITERAL, "User:b", Op.READ, ALLOW)]
    auth = authorizer(*bindings)
    by_a = AclBindingFilter(TOPIC, "t", LITERAL, "User:a", None, OPERATION_ANY, PermissionType.ANY)
    unknown = AclBindingFilter(TOPIC, "t", PatternType.UNKNOWN, None, None, OPERATION_ANY, PermissionType.ANY)
    results = auth.delete_acls([by_a, everything(), unknown])
    assert results == [(None, [bindings[0]]), (None, bindings), ("Unknown patternFilter.", [])]
    assert len(auth) == 0


def _open(directory):
    from minibroker.clock import BrokerClock
    from minibroker.metadata import BrokerMetadata
    from minibroker.storage.controller import Controller

    controller = Controller.open(directory, 1, 0)
    return controller, BrokerMetadata(controller, BrokerClock(), 1)


def test_the_metadata_log_keeps_the_bindings_across_an_unclean_stop_and_a_snapshot(tmp_path):
    from minibroker.acls import MetadataAclStore
    from minibroker.storage.acls_image import AclsImage

    controller, metadata = _open(tmp_path)
    auth = StandardAuthorizer(MetadataAclStore(metadata))
    auth.create_acls([acl(TOPIC, "orders", PREFIXED, "User:alice", Op.WRITE, ALLOW),
                      acl(Rt.CLUSTER, "kafka-cluster", LITERAL, "User:ops", OPERATION_ALL, ALLOW)])
    auth.delete_acls([AclBindingFilter(Rt.CLUSTER, None, ANY_PATTERN, None, None, OPERATION_ANY, PermissionType.ANY)])
    controller.close(clean=False)  # as kill -9 leaves it: no snapshot, the log replayed
    log = (tmp_path / "__cluster_metadata-0" / "00000000000000000000.log").read_bytes()
    assert (log.count(b'"type":"AccessControlEntryRecord"'), log.count(b'"type":"RemoveAccessControlEntryRecord"')) \
        == (2, 1)
    controller, metadata = _open(tmp_path)
    again = StandardAuthorizer(MetadataAclStore(metadata))
    assert len(again) == 1
    assert again.authorize("User:alice", "PLAINTEXT", "h", Op.WRITE, TOPIC, "orders-eu")
    assert not again.authorize("User:ops", "PLAINTEXT", "h", Op.ALTER, Rt.CLUSTER, "kafka-cluster")
    controller.close(clean=True, now_ms=0)  # snapshotted: the bindings are the snapshot's records
    controller, metadata = _open(tmp_path)
    assert [(r.resource_name, r.principal) for r in controller.image.section(AclsImage).acls.values()] == [
        ("orders", "User:alice")]
    assert len(StandardAuthorizer(MetadataAclStore(metadata))) == 1
    controller.close(clean=False)


def test_the_authorizers_of_a_cluster_follow_every_brokers_change(tmp_path):
    from minibroker.acls import MetadataAclStore
    from minibroker.clock import BrokerClock
    from minibroker.metadata import BrokerMetadata

    controller, first = _open(tmp_path)
    second = BrokerMetadata(controller, BrokerClock(), 2)
    one, two = StandardAuthorizer(MetadataAclStore(first)), StandardAuthorizer(MetadataAclStore(second))
    one.create_acls([acl(GROUP, "billing", LITERAL, "User:bob", Op.READ, ALLOW)])
    assert two.authorize("User:bob", "PLAINTEXT", LOCAL, Op.READ, GROUP, "billing")
    two.delete_acls([everything()])
    assert len(one) == 0 and not one.authorize("User:bob", "PLAINTEXT", LOCAL, Op.READ, GROUP, "billing")
    controller.close(clean=False)


def test_a_binding_the_log_holds_that_is_none_stops_the_start_naming_it(tmp_path):
    import uuid

    from minibroker.acls import MetadataAclStore
    from minibroker.storage.acls_image import AccessControlEntryRecord

    controller, metadata = _open(tmp_path)
    metadata.commit([AccessControlEntryRecord(uuid.uuid4(), int(Rt.CLUSTER), "other", int(LITERAL), "User:a", "*",
                                              int(Op.ALTER), int(ALLOW))])
    with pytest.raises(ValueError, match="the metadata log's ACL .* The only valid name for the CLUSTER resource"):
        StandardAuthorizer(MetadataAclStore(metadata))
    controller.close(clean=False)
