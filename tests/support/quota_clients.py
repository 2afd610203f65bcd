"""Helpers for quota tests with real clients: set a quota over the wire, and produce with
kafka-python reporting the throttle the client itself saw."""

from __future__ import annotations

from minibroker.admin_client import AdminClient

RECORD = b"r" * 1000


def alter_quota(bootstrap: str, entity: list[tuple[str, str]], key: str, value: float | None) -> None:
    """AlterClientQuotas: set `key` on `entity` [(type, name)], or remove it when `value` is None."""
    op = {"key": key, "value": value or 0.0, "remove": value is None}
    with AdminClient(bootstrap) as admin:
        result = admin.call(49, {"entries": [{
            "entity": [{"entity_type": t, "entity_name": n} for t, n in entity], "ops": [op]}],
            "validate_only": False})
    assert result.entries[0].error_code == 0, result.entries[0].error_message


def produce(bootstrap: str, topic: str, client_id: str, count: int) -> float:
    """Send `count` 1 kB records in one request with a fresh kafka-python producer (so the client's
    throttle metric is this request's alone); return that producer's throttle-time-max (ms)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, linger_ms=200,
                             batch_size=1 << 17, enable_idempotence=False, acks=1)
    try:
        futures = [producer.send(topic, RECORD, partition=0) for _ in range(count)]
        producer.flush(30)
        for future in futures:
            future.get(30)
        return producer.metrics()["producer-metrics"]["throttle-time-max"]
    finally:
        producer.close(timeout=5)
