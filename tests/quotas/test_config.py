"""The quota configuration store (quotas/config.py): AlterClientQuotas validation, DescribeClientQuotas
matching, JSON persistence, change notification."""

import pytest
from hypothesis import given, strategies as st

from minibroker.protocol.errors import ErrorCode
from minibroker.quotas.callback import DEFAULT, ClientQuotaEntity
from minibroker.quotas.config import QUOTA_KEYS, QuotaConfigStore

NONE, INVALID_REQUEST, UNSUPPORTED_VERSION = ErrorCode.none, ErrorCode.invalid_request, ErrorCode.unsupported_version

ALICE = [("user", "alice")]


def one(store, entity, *ops, validate_only=False):
    """Alter one entity; return its (error_code, error_message)."""
    (result,) = store.alter([(entity, list(ops))], validate_only)
    assert result[0] == tuple(entity)
    return result[1], result[2]


ALTER_ERRORS = [
    # (entity, ops, message)
    ([], [("producer_byte_rate", 10.0, False)], "Invalid empty client quota entity"),
    ([("foo", "bar")], [("producer_byte_rate", 10.0, False)], "Unhandled client quota entity type: foo"),
    (
        [("user", "alice"), ("foo", "bar")],
        [("producer_byte_rate", 10.0, False)],
        "Unhandled client quota entity type: foo",
    ),
    ([("user", "")], [("producer_byte_rate", 10.0, False)], "Empty user not supported"),
    ([("client-id", "")], [("producer_byte_rate", 10.0, False)], "Empty client-id not supported"),
    (
        [("user", "alice"), ("ip", "1.2.3.4")],
        [("producer_byte_rate", 10.0, False)],
        "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId",
    ),
    (
        [("client-id", "c"), ("ip", None)],
        [("connection_creation_rate", 10.0, False)],
        "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId",
    ),
    ([("ip", "not-an-ip")], [("connection_creation_rate", 10.0, False)], "not-an-ip is not a valid IP or resolvable host."),
    (ALICE, [("not.a.quota.key", 1.0, False)], "Invalid configuration key not.a.quota.key"),
    (ALICE, [("connection_creation_rate", 10.0, False)], "Invalid configuration key connection_creation_rate"),
    ([("ip", "1.2.3.4")], [("producer_byte_rate", 10.0, False)], "Invalid configuration key producer_byte_rate"),
    ([("client-id", "c")], [("producer_ids_rate", 10.0, False)], "Invalid configuration key producer_ids_rate"),
    (
        [("user", "alice"), ("client-id", "c")],
        [("producer_ids_rate", 10.0, False)],
        "Invalid configuration key producer_ids_rate",
    ),
    (ALICE, [("producer_byte_rate", 0.0, False)], "Quota producer_byte_rate must be greater than 0"),
    (ALICE, [("consumer_byte_rate", -2.0, False)], "Quota consumer_byte_rate must be greater than 0"),
    (ALICE, [("request_percentage", -0.5, False)], "Quota request_percentage must be greater than 0"),
    (ALICE, [("request_percentage", float("nan"), False)], "Quota request_percentage must be a number"),
    (ALICE, [("producer_byte_rate", 1.5, False)], "producer_byte_rate cannot be a fractional value."),
    (ALICE, [("producer_ids_rate", 0.0, False)], "Quota producer_ids_rate must be greater than 0"),
    (ALICE, [("producer_ids_rate", float("inf"), False)], "Quota producer_ids_rate must be a finite number"),
    (
        ALICE,
        [("consumer_byte_rate", 36893488147419103232.4, False)],
        "Proposed value for consumer_byte_rate is too large for a LONG.",
    ),
    (
        [("ip", "10.0.0.1")],
        [("connection_creation_rate", 3e9, False)],
        "Proposed value for connection_creation_rate is too large for an INT.",
    ),
    (
        ALICE,
        [("producer_byte_rate", 10.0, False), ("producer_byte_rate", 20.0, False)],
        "Duplicate quota key producer_byte_rate not updating quota for this entity "
        "ClientQuotaEntity(entries={user=alice})",
    ),
    # The first failing op decides, in request order; the valid op before it is not applied.
    (
        ALICE,
        [("request_percentage", 99.9, False), ("not.a.quota.key", 1.0, False)],
        "Invalid configuration key not.a.quota.key",
    ),
]


@pytest.mark.parametrize("entity, ops, message", ALTER_ERRORS)
def test_alter_rejects(entity, ops, message):
    changes = []
    store = QuotaConfigStore(on_change=lambda *c: changes.append(c))
    assert one(store, entity, *ops) == (INVALID_REQUEST, message)
    assert len(store) == 0 and changes == []


@pytest.mark.parametrize(
    "entity, ops",
    [
        (ALICE, [("request_percentage", 12.5, False)]),
        ([("user", None)], [("producer_ids_rate", 1000.0, False)]),
        (ALICE, [("producer_ids_rate", 1000.0, False)]),
        (ALICE, [("producer_ids_rate", 2.5, False)]),  # a double: fractions are accepted
        ([("user", None)], [("producer_ids_rate", 0.5, False)]),
        ([("user", "alice"), ("client-id", None)], [("producer_byte_rate", 1024.0, False)]),
        ([("client-id", "c")], [("controller_mutation_rate", 0.5, False)]),
        ([("ip", "10.0.0.1")], [("connection_creation_rate", 10.0, False)]),
        ([("ip", "::1")], [("connection_creation_rate", 10.0, False)]),
        ([("ip", None)], [("connection_creation_rate", 10.0, False)]),
        (ALICE, [("producer_byte_rate", 1024.0000001, False)]),  # within Kafka's 1e-6 tolerance
        (ALICE, [("not.a.quota.key", 0.0, True)]),  # removing an unset key: a no-op, even unknown
    ],
)
def test_alter_accepts(entity, ops):
    store = QuotaConfigStore()
    assert one(store, entity, *ops) == (NONE, None)


def test_alter_applies_and_reports_changes():
    changes = []
    store = QuotaConfigStore(on_change=lambda *c: changes.append(c))
    alice = ClientQuotaEntity.of(user="alice")
    assert one(store, ALICE, ("producer_byte_rate", 1024.0, False), ("consumer_byte_rate", 2048.0, False)) == (
        NONE,
        None,
    )
    assert store.quotas_for(alice) == {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0}
    assert changes == [(alice, "producer_byte_rate", 1024.0), (alice, "consumer_byte_rate", 2048.0)]
    changes.clear()
    # Setting the same value again changes nothing; removing an unset key neither.
    assert one(store, ALICE, ("producer_byte_rate", 1024.0, False), ("request_percentage", 0.0, True)) == (NONE, None)
    assert changes == []
    # Removal reports value None; the entity goes when its last key does.
    one(store, ALICE, ("producer_byte_rate", 0.0, True))
    one(store, ALICE, ("consumer_byte_rate", 0.0, True))
    assert changes == [(alice, "producer_byte_rate", None), (alice, "consumer_byte_rate", None)]
    assert len(store) == 0


def test_validate_only_changes_nothing():
    changes = []
    store = QuotaConfigStore(on_change=lambda *c: changes.append(c))
    assert one(store, ALICE, ("producer_byte_rate", 1024.0, False), validate_only=True) == (NONE, None)
    assert len(store) == 0 and changes == []


def test_each_entity_succeeds_or_fails_alone_and_duplicates_are_flagged():
    store = QuotaConfigStore()
    bob = [("user", "bob")]
    results = store.alter(
        [
            (ALICE, [("producer_byte_rate", 100.0, False)]),
            (bob, [("producer_byte_rate", 100.0, False), ("producer_byte_rate", 5.0, False)]),
            ([("client-id", "c")], [("consumer_byte_rate", 100.0, False)]),
            # alice again: the entity is flagged, yet (as in Kafka) its first occurrence applies
            ([("user", "alice")], [("producer_byte_rate", 999.0, False)]),
        ]
    )
    assert [(e, code) for e, code, _ in results] == [
        (tuple(ALICE), INVALID_REQUEST),
        (tuple(bob), INVALID_REQUEST),
        ((("client-id", "c"),), NONE),
    ]
    assert results[0][2] == "Ignoring duplicate entity ClientQuotaEntity(entries={user=alice})"
    assert store.quotas_for(ClientQuotaEntity.of(user="alice")) == {"producer_byte_rate": 100.0}
    assert store.quotas_for(ClientQuotaEntity.of(user="bob")) == {}
    assert store.quotas_for(ClientQuotaEntity.of(client_id="c")) == {"consumer_byte_rate": 100.0}


def test_entity_identity_ignores_pair_order():
    store = QuotaConfigStore()
    results = store.alter(
        [
            ([("user", "a"), ("client-id", "c")], [("producer_byte_rate", 1.0, False)]),
            ([("client-id", "c"), ("user", "a")], [("producer_byte_rate", 2.0, False)]),
        ]
    )
    assert len(results) == 1 and results[0][1] == INVALID_REQUEST


def test_key_table_is_a_dict():
    # KIP-936's QuotaConfigs defines producer_ids_rate as a DOUBLE (new ids per window).
    assert QUOTA_KEYS["producer_ids_rate"].kind.value == "DOUBLE"
    assert QUOTA_KEYS["request_percentage"].kind.value == "DOUBLE"


# -- DescribeClientQuotas ----------------------------------------------------------------------

STORED = {
    "A": [("user", "alice")],
    "B": [("user", "alice"), ("client-id", "c1")],
    "C": [("user", None)],
    "D": [("client-id", "c1")],
    "E": [("client-id", None)],
    "F": [("user", None), ("client-id", None)],
    "G": [("ip", "10.0.0.1")],
    "H": [("ip", None)],
}


@pytest.fixture
def described():
    store = QuotaConfigStore()
    for label, entity in STORED.items():
        key = "connection_creation_rate" if entity[0][0] == "ip" else "producer_byte_rate"
        assert one(store, entity, (key, 100.0, False)) == (NONE, None)
    by_entity = {ClientQuotaEntity.from_pairs(e): label for label, e in STORED.items()}

    def run(components, strict):
        code, message, entries = store.describe(components, strict)
        assert (code, message) == (NONE, None)
        return "".join(sorted(by_entity[entity] for entity, _ in entries))

    return run


@pytest.mark.parametrize(
    "components, strict, expected",
    [
        ([], False, "ABCDEFGH"),
        ([], True, ""),
        ([("user", 0, "alice")], False, "AB"),
        ([("user", 0, "alice")], True, "A"),
        ([("user", 1, None)], False, "CF"),
        ([("user", 1, None)], True, "C"),
        ([("user", 2, None)], False, "ABCF"),
        ([("user", 2, None), ("client-id", 2, None)], False, "BF"),
        ([("user", 2, None), ("client-id", 1, None)], True, "F"),
        ([("client-id", 0, "c1")], True, "D"),
        ([("client-id", 0, "c1")], False, "BD"),
        ([("user", 0, "nobody")], False, ""),
        ([("ip", 1, None)], False, "H"),
        ([("ip", 2, None)], True, "GH"),
        ([("ip", 0, "10.0.0.1")], False, "G"),
    ],
)
def test_describe_matching(described, components, strict, expected):
    assert described(components, strict) == expected


def test_describe_returns_values():
    store = QuotaConfigStore()
    one(store, ALICE, ("producer_byte_rate", 100.0, False), ("request_percentage", 50.0, False))
    assert store.describe([("user", 0, "alice")]) == (
        NONE,
        None,
        [(ClientQuotaEntity.of(user="alice"), {"producer_byte_rate": 100.0, "request_percentage": 50.0})],
    )


@pytest.mark.parametrize(
    "components, code, message",
    [
        ([("", 0, "x")], INVALID_REQUEST, "Invalid empty entity type."),
        (
            [("user", 0, "a"), ("user", 2, None)],
            INVALID_REQUEST,
            "Entity type user cannot appear more than once in the filter.",
        ),
        ([("foo", 2, None)], UNSUPPORTED_VERSION, "Unsupported entity type foo"),
        ([("user", 0, None)], INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, but set match string to null."),
        (
            [("user", 1, "a")],
            INVALID_REQUEST,
            "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.",
        ),
        (
            [("user", 2, "a")],
            INVALID_REQUEST,
            "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.",
        ),
        ([("user", 3, None)], INVALID_REQUEST, "Unknown match type 3"),
        (
            [("ip", 2, None), ("client-id", 0, "c")],
            INVALID_REQUEST,
            "Invalid entity filter component combination. IP filter component should not be used with "
            "user or clientId filter component.",
        ),
    ],
)
def test_describe_errors(components, code, message):
    assert QuotaConfigStore().describe(components, False) == (code, message, [])


# -- persistence -------------------------------------------------------------------------------

names = st.one_of(st.none(), st.text(min_size=1, max_size=8))
user_client_entities = st.one_of(
    st.tuples(names).map(lambda n: [("user", n[0])]),
    st.tuples(names).map(lambda n: [("client-id", n[0])]),
    st.tuples(names, names).map(lambda n: [("user", n[0]), ("client-id", n[1])]),
)
integral = st.integers(min_value=1, max_value=2**40).map(float)
rates = st.floats(min_value=1e-3, max_value=1e6)


@given(
    st.lists(
        st.tuples(
            user_client_entities,
            st.fixed_dictionaries(
                {},
                optional={"producer_byte_rate": integral, "consumer_byte_rate": integral, "request_percentage": rates},
            ),
        ),
        max_size=8,
    )
)
def test_json_round_trip(entries):
    store = QuotaConfigStore()
    store.alter([(entity, [(k, v, False) for k, v in quotas.items()]) for entity, quotas in entries])
    text = store.to_json()
    loaded = QuotaConfigStore.from_json(text)
    assert loaded == store
    assert loaded.to_json() == text  # stable bytes


def test_from_json_and_replay():
    store = QuotaConfigStore()
    one(store, [("user", None)], ("producer_ids_rate", 50.0, False))
    one(store, [("ip", "10.0.0.1")], ("connection_creation_rate", 5.0, False))
    seen = []
    QuotaConfigStore.from_json(store.to_json()).replay(lambda *c: seen.append(c))
    assert sorted(seen, key=str) == sorted(
        [
            (ClientQuotaEntity.of(user=DEFAULT), "producer_ids_rate", 50.0),
            (ClientQuotaEntity.of(ip="10.0.0.1"), "connection_creation_rate", 5.0),
        ],
        key=str,
    )


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"version": 2, "entities": []}',
        '{"version": 1}',
        '{"version": 1, "entities": [{"entity": [{"type": "user", "name": 3}], "quotas": {}}]}',
        '{"version": 1, "entities": [{"entity": [{"type": "user", "name": "a"}], "quotas": {"k": "1"}}]}',
        '{"version": 1, "entities": [{"entity": [{"type": "user", "name": "a"}, {"type": "user", "name": "b"}],'
        ' "quotas": {"k": 1}}]}',
    ],
)
def test_from_json_rejects_malformed(text):
    with pytest.raises(ValueError):
        QuotaConfigStore.from_json(text)


def test_an_entity_naming_a_type_twice_names_it_once_with_the_last_name():
    # Kafka's AlterClientQuotasRequest.entries() puts the entity's pairs into a map, so a type named
    # twice is not an error: the last name wins, and the answer names the entity as read.
    store = QuotaConfigStore()
    results = store.alter([([("user", "a"), ("client-id", "c"), ("user", "b")], [("producer_byte_rate", 10.0, False)])])
    assert results == [((("user", "b"), ("client-id", "c")), NONE, None)]
    assert store.quotas_for(ClientQuotaEntity.of(user="b", client_id="c")) == {"producer_byte_rate": 10.0}
    assert store.quotas_for(ClientQuotaEntity.of(user="a", client_id="c")) == {}
