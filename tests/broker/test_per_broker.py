"""Two brokers in one process keep apart what is theirs: their log lines name them ("[broker N]",
minibroker.log_context), from their construction, from the tasks that serve them and from their
background work; each has its own handler registry and its own storage-error log limiter, so
nothing one does shows up in the other.
"""

from __future__ import annotations

import dataclasses
import logging

import trio

from minibroker.broker import Broker
from minibroker.clock import BrokerClock
from minibroker.config import BrokerConfig
from minibroker.context import Connection
from minibroker.log_context import broker_log_context, current_broker
from minibroker.server import serve
from tests.support.broker_shell import decode, idempotent_produce_frame, produce_frame
from tests.support.clock import run

TOPIC = "per-broker"


def new_broker(tmp_path, node_id: int) -> Broker:
    broker = Broker(BrokerConfig({"log.dirs": str(tmp_path / f"data-{node_id}"), "listeners": "127.0.0.1:0",
                                  "node.id": str(node_id), "producer.id.expiration.ms": "60000",
                                  "producer.id.expiration.check.interval.ms": "1000"}), clock=BrokerClock())
    broker.logs.create_topic(TOPIC, 1, {}, 0)
    return broker


def lines(caplog, text: str) -> dict[int | None, list[str]]:
    found: dict[int | None, list[str]] = {}
    for record in caplog.records:
        if text in record.getMessage():
            found.setdefault(record.broker_id, []).append(record.getMessage())
    return found


def test_log_lines_name_their_broker(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="minibroker")
    brokers = [new_broker(tmp_path, 0), new_broker(tmp_path, 1)]

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for broker in brokers:
                await nursery.start(lambda task_status, b=broker: serve(broker=b, task_status=task_status))
            for broker in brokers:
                frame = produce_frame("c", 10)  # a plain batch: the idempotent one below leaves state
                assert decode((await broker.handle_frame(frame, Connection("t"))).data, 0, 9)
            assert current_broker() is None  # the test's own task is no broker's
            await idempotent(brokers[1], 42)
            brokers[1].clock.advance(61)  # broker 1's producer id expires, in its background task
            await trio.sleep(2)
            nursery.cancel_scope.cancel()

    run(main)
    for broker in brokers:
        broker.close()
    registered = lines(caplog, "registered 0 partition(s)")  # while each opened its data directory
    assert {node: len(found) for node, found in registered.items()} == {0: 1, 1: 1}
    assert registered[0][0].startswith("[broker 0] ") and registered[1][0].startswith("[broker 1] ")
    ready = lines(caplog, "minibroker ready on")  # the task serving each
    assert sorted(ready) == [0, 1] and ready[1][0].startswith("[broker 1] minibroker ready on 127.0.0.1:")
    assert lines(caplog, "expired 1 idle producer id(s)") == {1: ["[broker 1] expired 1 idle producer id(s)"]}
    # Lines of no broker's work are left as they are.
    logging.getLogger("minibroker.test").info("no broker here")
    with broker_log_context(5):
        logging.getLogger("elsewhere").warning("not ours")
    assert lines(caplog, "no broker here") == {None: ["no broker here"]}
    assert lines(caplog, "not ours") == {5: ["not ours"]}


async def idempotent(broker: Broker, producer_id: int) -> None:
    frame = idempotent_produce_frame(producer_id, topic=TOPIC)
    response = decode((await broker.handle_frame(frame, Connection("t"))).data, 0, 9)
    assert response.responses[0].partition_responses[0].error_code == 0


def test_each_broker_has_its_own_handler_registry_and_storage_error_log(tmp_path, caplog):
    first, second = new_broker(tmp_path, 0), new_broker(tmp_path, 1)
    assert first.handlers is not second.handlers and first.handlers == second.handlers
    first.handlers = {**first.handlers, 3: dataclasses.replace(first.handlers[3], name="replaced")}
    assert first.services.handlers[3].name == "replaced" and second.handlers[3].name == "metadata"
    # The same storage fault on both, within the minute each logs a message once: each logs it.
    caplog.set_level(logging.ERROR, logger="minibroker")

    async def fail_both() -> None:
        for broker in (first, second, first, second):
            broker.storage_errors.error("t-0: No space left on device (disk full)")

    run(fail_both)
    assert len([r for r in caplog.records if "No space left" in r.getMessage()]) == 2
    first.close()
    second.close()
