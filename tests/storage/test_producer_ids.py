"""ProducerIdAllocator: ids strictly increase, across reopen and across a crash (a new allocator on
the same directory while the old one was mid-block, without any close)."""

from __future__ import annotations

import json

import pytest

from minibroker.storage.errors import DamagedFileError
from minibroker.storage.producer_ids import PRODUCER_IDS_FILE, ProducerIdAllocator


def test_ids_start_at_zero_and_increase(tmp_path):
    allocator = ProducerIdAllocator(tmp_path)
    assert [allocator.next_id() for _ in range(5)] == [0, 1, 2, 3, 4]


def test_block_is_persisted_before_use(tmp_path):
    allocator = ProducerIdAllocator(tmp_path, block_size=10)
    assert not (tmp_path / PRODUCER_IDS_FILE).exists()
    allocator.next_id()
    assert json.loads((tmp_path / PRODUCER_IDS_FILE).read_text())["next_block_start"] == 10
    for _ in range(9):
        allocator.next_id()
    assert allocator.reserved_until == 10
    assert allocator.next_id() == 10
    assert json.loads((tmp_path / PRODUCER_IDS_FILE).read_text())["next_block_start"] == 20


def test_ids_never_repeat_across_reopens_and_crashes(tmp_path):
    seen: list[int] = []
    for round_ in range(6):
        allocator = ProducerIdAllocator.open(tmp_path, block_size=7)
        # Crash anywhere: mid-block, at a block edge, before handing out anything.
        for _ in range(round_ * 3):
            seen.append(allocator.next_id())
    assert seen == sorted(set(seen))
    assert not list(tmp_path.glob("*.tmp"))


def test_unreadable_file_refuses_to_start(tmp_path):
    (tmp_path / PRODUCER_IDS_FILE).write_text("garbage")
    with pytest.raises(ValueError):
        ProducerIdAllocator(tmp_path)


@pytest.mark.parametrize("content", ['{"version": 1, "next_block_start": -1}', '{"next_block_start": 1.5}', "[]"])
def test_an_impossible_next_block_start_refuses_naming_the_file(tmp_path, content):
    (tmp_path / "producer-ids").write_text(content)
    with pytest.raises(DamagedFileError) as damaged:
        ProducerIdAllocator(tmp_path)
    assert str(tmp_path / "producer-ids") in str(damaged.value)
