"""ProducerIdAllocator: ids strictly increase, across reopen and across a crash (a new allocator on
the same metadata log while the old one was mid-block, without any close); the block is in the
metadata log before an id of it is handed out; an earlier version's producer-ids file is read with
its checks."""

from __future__ import annotations

import pytest

from minibroker.storage.controller import Controller
from minibroker.storage.errors import DamagedFileError
from minibroker.storage.producer_ids import PRODUCER_IDS_FILE, ProducerIdAllocator, read_legacy_file


def allocator_on(controller: Controller, block_size: int = 1000) -> ProducerIdAllocator:
    return ProducerIdAllocator(lambda size: controller.allocate_producer_ids(1, 0, size), block_size)


def test_ids_start_at_zero_and_increase(tmp_path):
    controller = Controller.open(tmp_path, 1, 0)
    allocator = allocator_on(controller)
    assert [allocator.next_id() for _ in range(5)] == [0, 1, 2, 3, 4]
    controller.close()


def test_block_is_recorded_before_use(tmp_path):
    controller = Controller.open(tmp_path, 1, 0)
    allocator = allocator_on(controller, block_size=10)
    assert controller.image.producer_ids.next_producer_id == 0
    allocator.next_id()
    assert controller.image.producer_ids.next_producer_id == 10
    for _ in range(9):
        allocator.next_id()
    assert allocator.reserved_until == 10
    assert allocator.next_id() == 10
    assert controller.image.producer_ids.next_producer_id == 20
    controller.close(clean=False)
    reopened = Controller.open(tmp_path, 1, 0)  # durable: in the log, not only in memory
    assert reopened.image.producer_ids.next_producer_id == 20
    reopened.close()


def test_ids_never_repeat_across_reopens_and_crashes(tmp_path):
    seen: list[int] = []
    for round_ in range(6):
        controller = Controller.open(tmp_path, 1, 0)
        allocator = allocator_on(controller, block_size=7)
        # Crash anywhere: mid-block, at a block edge, before handing out anything.
        for _ in range(round_ * 3):
            seen.append(allocator.next_id())
        controller.close(clean=False)
    assert seen == sorted(set(seen))


def test_two_brokers_never_share_a_block(tmp_path):
    controller = Controller.open(tmp_path, 1, 0)
    one = ProducerIdAllocator(lambda size: controller.allocate_producer_ids(1, 0, size), 5)
    two = ProducerIdAllocator(lambda size: controller.allocate_producer_ids(2, 0, size), 5)
    ids = [one.next_id(), two.next_id(), one.next_id(), two.next_id()]
    assert ids == [0, 5, 1, 6]
    controller.close()


def test_an_earlier_version_file_is_read(tmp_path):
    assert read_legacy_file(tmp_path) is None
    (tmp_path / PRODUCER_IDS_FILE).write_text('{"version": 1, "next_block_start": 3000}')
    assert read_legacy_file(tmp_path) == 3000


@pytest.mark.parametrize("content", ["garbage", '{"version": 1, "next_block_start": -1}', '{"next_block_start": 1.5}',
                                     "[]"])
def test_an_impossible_next_block_start_refuses_naming_the_file(tmp_path, content):
    (tmp_path / "producer-ids").write_text(content)
    with pytest.raises(DamagedFileError) as damaged:
        read_legacy_file(tmp_path)
    assert str(tmp_path / "producer-ids") in str(damaged.value)
