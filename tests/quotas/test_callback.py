"""The quota callback (quotas/callback.py): Kafka's eight precedence levels, entities, and loading a
custom callback by import path."""

import pytest

from minibroker.quotas.callback import (
    CALLBACK_CLASS_CONFIG,
    DEFAULT,
    ClientQuotaCallback,
    ClientQuotaEntity,
    DefaultQuotaCallback,
    QuotaType,
    load_callback,
)
from minibroker.quotas.client_quota import ClientQuotaManager

USER, CLIENT = "alice", "c1"

# (level, entity, expected metric tags) for a request from (alice, c1), most specific first.
LEVELS = [
    (1, ClientQuotaEntity.of(user=USER, client_id=CLIENT), (USER, CLIENT)),
    (2, ClientQuotaEntity.of(user=USER, client_id=DEFAULT), (USER, CLIENT)),
    (3, ClientQuotaEntity.of(user=USER), (USER, "")),
    (4, ClientQuotaEntity.of(user=DEFAULT, client_id=CLIENT), (USER, CLIENT)),
    (5, ClientQuotaEntity.of(user=DEFAULT, client_id=DEFAULT), (USER, CLIENT)),
    (6, ClientQuotaEntity.of(user=DEFAULT), (USER, "")),
    (7, ClientQuotaEntity.of(client_id=CLIENT), ("", CLIENT)),
    (8, ClientQuotaEntity.of(client_id=DEFAULT), ("", CLIENT)),
]

# Quotas on other users and clients, which must never match (alice, c1).
DECOYS = [
    ClientQuotaEntity.of(user="bob", client_id=CLIENT),
    ClientQuotaEntity.of(user=USER, client_id="c2"),
    ClientQuotaEntity.of(user="bob"),
    ClientQuotaEntity.of(user=DEFAULT, client_id="c2"),
    ClientQuotaEntity.of(client_id="c2"),
]


@pytest.mark.parametrize("level, entity, tags", LEVELS, ids=[f"level{lv}" for lv, _, _ in LEVELS])
def test_precedence_level_shadows_every_less_specific_one(level, entity, tags):
    callback = DefaultQuotaCallback()
    for decoy in DECOYS:
        callback.update_quota(QuotaType.PRODUCE, decoy, 1.0)
    # Configure this level and every less specific one, each with its own limit (100 * level).
    for lv, e, _ in LEVELS[level - 1 :]:
        callback.update_quota(QuotaType.PRODUCE, e, 100.0 * lv)
    got = callback.quota_metric_tags(QuotaType.PRODUCE, USER, CLIENT)
    assert got == {"user": tags[0], "client-id": tags[1]}
    assert callback.quota_limit(QuotaType.PRODUCE, got) == 100.0 * level
    # Other quota types are independent.
    assert callback.quota_limit(QuotaType.FETCH, got) is None
    # Removing this level exposes the next one.
    callback.remove_quota(QuotaType.PRODUCE, entity)
    if level < 8:
        next_tags = callback.quota_metric_tags(QuotaType.PRODUCE, USER, CLIENT)
        assert callback.quota_limit(QuotaType.PRODUCE, next_tags) == 100.0 * (level + 1)


def test_no_quota_means_client_tags_and_no_limit():
    callback = DefaultQuotaCallback()
    tags = callback.quota_metric_tags(QuotaType.PRODUCE, USER, CLIENT)
    assert tags == {"user": "", "client-id": CLIENT}
    assert callback.quota_limit(QuotaType.PRODUCE, tags) is None
    assert callback.quota_limit(QuotaType.PRODUCE, {"other": "x"}) is None
    assert not callback.quota_reset_required(QuotaType.PRODUCE)
    assert not callback.update_cluster_metadata(object())
    callback.close()


def test_default_callback_rejects_ip_entities():
    with pytest.raises(ValueError):
        DefaultQuotaCallback().update_quota(QuotaType.PRODUCE, ClientQuotaEntity.of(ip="1.2.3.4"), 1.0)


def test_entity_views():
    entity = ClientQuotaEntity.from_pairs([("client-id", None), ("user", "alice")])
    assert entity == ClientQuotaEntity.of(user="alice", client_id=DEFAULT)
    assert entity.entries == (("user", "alice"), ("client-id", None))
    assert (entity.user, entity.client_id, entity.ip) == ("alice", DEFAULT, None)
    assert entity.as_dict() == {"user": "alice", "client-id": None}
    assert entity.types == {"user", "client-id"}
    assert str(entity) == "ClientQuotaEntity(entries={user=alice, client-id=null})"
    assert hash(entity) == hash(ClientQuotaEntity.of(client_id=DEFAULT, user="alice"))
    with pytest.raises(ValueError):
        ClientQuotaEntity.from_pairs([("user", "a"), ("user", "b")])


def test_quota_type_keys():
    assert QuotaType.for_config_key("producer_byte_rate") is QuotaType.PRODUCE
    assert QuotaType.for_config_key("consumer_byte_rate") is QuotaType.FETCH
    assert QuotaType.for_config_key("request_percentage") is QuotaType.REQUEST
    assert QuotaType.for_config_key("connection_creation_rate") is None
    assert QuotaType.PRODUCE.group == "Produce"


class TenantCallback(ClientQuotaCallback):
    """A custom callback: principals "tenant-user" share their tenant's quota, whatever the client."""

    def __init__(self):
        self.limits = {}
        self.reset = False
        self.closed = False

    def quota_metric_tags(self, quota_type, principal, client_id):
        return {"tenant": principal.split("-", 1)[0]}

    def quota_limit(self, quota_type, metric_tags):
        return self.limits.get((quota_type, metric_tags.get("tenant")))

    def update_quota(self, quota_type, entity, new_value):
        self.limits[(quota_type, entity.user)] = new_value

    def remove_quota(self, quota_type, entity):
        self.limits.pop((quota_type, entity.user), None)

    def quota_reset_required(self, quota_type):
        reset, self.reset = self.reset, False
        return reset

    def close(self):
        self.closed = True


class DuckCallback:
    """Not a subclass, but has every method: accepted."""

    def quota_metric_tags(self, quota_type, principal, client_id):
        return {}

    def quota_limit(self, quota_type, metric_tags):
        return None

    def update_quota(self, quota_type, entity, new_value):
        pass

    def remove_quota(self, quota_type, entity):
        pass

    def quota_reset_required(self, quota_type):
        return False

    def update_cluster_metadata(self, metadata):
        return False

    def close(self):
        pass


class Incomplete(ClientQuotaCallback):
    def quota_metric_tags(self, quota_type, principal, client_id):
        return {}


class NotACallback:
    pass


NOT_A_CLASS = object()


@pytest.mark.parametrize("sep", [":", "."])
def test_custom_callback_swapped_in_by_import_path(sep):
    callback = load_callback(f"{__name__}{sep}TenantCallback")
    assert type(callback).__name__ == "TenantCallback"
    manager = ClientQuotaManager(QuotaType.PRODUCE, callback)
    assert manager.quotas_enabled  # a custom callback enables quotas from the start
    manager.update_quota(ClientQuotaEntity.of(user="acme"), 100.0)
    # acme-alice and acme-bob share acme's quota: 600 + 600 = 1200 / 10 s = 120 B/s;
    # (120 - 100) / 100 * 10 000 ms = 2000 ms
    assert manager.record_and_get_throttle_time_ms("acme-alice", "x", 600, 0) == 0
    assert manager.record_and_get_throttle_time_ms("acme-bob", "y", 600, 0) == 2000
    assert manager.metrics_snapshot(0)[0][:3] == ("Produce", "byte-rate", {"tenant": "acme"})
    # Limits changed behind the manager's back take effect once the callback asks for a reset.
    callback.limits[(QuotaType.PRODUCE, "acme")] = 1000.0
    callback.reset = True
    assert manager.record_and_get_throttle_time_ms("acme-bob", "y", 0, 0) == 0


def test_duck_typed_callback_is_accepted():
    assert isinstance(load_callback(f"{__name__}:DuckCallback"), DuckCallback)


@pytest.mark.parametrize(
    "path, reason",
    [
        ("no_such_module_xyz:Cb", "cannot import module"),
        (f"{__name__}:Missing", "has no attribute"),
        (f"{__name__}:NOT_A_CLASS", "is not a class"),
        (f"{__name__}:NotACallback", "does not implement ClientQuotaCallback"),
        (f"{__name__}:Incomplete", "does not implement ClientQuotaCallback"),
        ("JustAName", "expected"),
    ],
)
def test_load_callback_errors_name_the_config_key(path, reason):
    with pytest.raises(ValueError) as excinfo:
        load_callback(path)
    message = str(excinfo.value)
    assert message.startswith(f"{CALLBACK_CLASS_CONFIG}=")
    assert reason in message
