"""Share group records (storage/share_group_records.py): the target-assignment metadata's
assignment timestamp (tag 0 of ShareGroupTargetAssignmentMetadataValue, KIP-1263) in Kafka's bytes."""

from __future__ import annotations

import struct

import pytest

from minibroker.storage.share_group_records import assignment_metadata_value, parse_assignment_metadata_value


def test_the_assignment_timestamp_is_tag_0_and_left_out_at_0():
    # version 0, epoch 7, no tagged fields
    assert assignment_metadata_value((7, 0)) == struct.pack(">hiB", 0, 7, 0)
    # version 0, epoch 7, one tagged field: tag 0, 8 bytes, the timestamp
    assert assignment_metadata_value((7, 1_700_000_000_123)) == struct.pack(">hiBBBq", 0, 7, 1, 0, 8, 1_700_000_000_123)
    for value in ((7, 0), (7, 1_700_000_000_123)):
        assert parse_assignment_metadata_value(assignment_metadata_value(value)) == value


def test_a_timestamp_of_the_wrong_size_is_refused():
    with pytest.raises(ValueError, match="assignmentTimestamp"):
        parse_assignment_metadata_value(struct.pack(">hiBBBi", 0, 7, 1, 0, 4, 5))
