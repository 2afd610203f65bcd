"""OffsetIndex and TimeIndex against a plain sorted list searched with bisect (as Kafka's
OffsetIndexTest checks against a TreeMap), including their files surviving a reload."""

from __future__ import annotations

import bisect
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.storage.index import NO_TIMESTAMP, OffsetIndex, TimeIndex

BASE = 1_000


def _increasing(draw_list):
    out, total = [], 0
    for step in draw_list:
        total += step
        out.append(total)
    return out


offset_entries = st.lists(st.tuples(st.integers(1, 50), st.integers(1, 5000)), max_size=60).map(
    lambda steps: list(zip(_increasing([s for s, _ in steps]), _increasing([p for _, p in steps])))
)


def _expected_offset_lookup(entries, target):
    keys = [BASE + o for o, _ in entries]
    i = bisect.bisect_right(keys, target) - 1
    return (BASE, 0) if i < 0 else (keys[i], entries[i][1])


@settings(max_examples=60, deadline=None)
@given(entries=offset_entries, targets=st.lists(st.integers(BASE - 10, BASE + 3000), max_size=20),
       truncate=st.integers(BASE - 5, BASE + 3000))
def test_offset_index_lookup_matches_bisect_model(entries, targets, truncate):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "00000000000000001000.index"
        index = OffsetIndex(path, BASE, 10 * 1024 * 1024)
        for relative, position in entries:
            index.append(BASE + relative, position)
        for target in targets:
            assert index.lookup(target) == _expected_offset_lookup(entries, target)

        # The file holds the same entries once closed (entries are written lazily).
        index.close()
        log_size = (entries[-1][1] + 1) if entries else 1
        loaded = OffsetIndex.load(path, BASE, 10 * 1024 * 1024, log_size)
        assert loaded is not None
        assert loaded.entries() == [(BASE + o, p) for o, p in entries]
        for target in targets:
            assert loaded.lookup(target) == _expected_offset_lookup(entries, target)

        # truncate_to drops entries at or above the offset, in memory and on disk.
        loaded.truncate_to(truncate)
        kept = [(o, p) for o, p in entries if BASE + o < truncate]
        assert loaded.entries() == [(BASE + o, p) for o, p in kept]
        loaded.close()
        again = OffsetIndex.load(path, BASE, 10 * 1024 * 1024, log_size)
        assert again is not None and again.entries() == loaded.entries()


def test_offset_index_rejects_bad_files(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex(path, 0, 1 << 20)
    index.append(5, 100)
    index.append(9, 200)
    index.close()
    assert OffsetIndex.load(path, 0, 1 << 20, 201) is not None
    # An entry pointing past the end of the log.
    assert OffsetIndex.load(path, 0, 1 << 20, 150) is None
    # A torn entry.
    path.write_bytes(path.read_bytes() + b"\x00\x01")
    assert OffsetIndex.load(path, 0, 1 << 20, 201) is None
    # Entries out of order.
    path.write_bytes(bytes.fromhex("00000009000000c8 0000000500000064".replace(" ", "")))
    assert OffsetIndex.load(path, 0, 1 << 20, 201) is None
    assert OffsetIndex.load(tmp_path / "missing.index", 0, 1 << 20, 201) is None


def test_offset_index_refuses_non_increasing_entries(tmp_path):
    index = OffsetIndex(tmp_path / "x.index", 0, 1 << 20)
    index.append(3, 10)
    try:
        index.append(3, 20)
    except ValueError:
        pass
    else:
        raise AssertionError("a repeated offset was accepted")
    assert index.is_full is False
    index.close()


time_entries = st.lists(st.tuples(st.integers(-1, 40), st.integers(0, 30)), max_size=60)


@settings(max_examples=60, deadline=None)
@given(candidates=time_entries, targets=st.lists(st.integers(-5, 2000), max_size=20),
       truncate=st.integers(BASE, BASE + 1000))
def test_time_index_matches_bisect_model(candidates, targets, truncate):
    """maybe_append keeps only growing timestamps; lookup is the largest entry <= target."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "00000000000000001000.timeindex"
        index = TimeIndex(path, BASE, 10 * 1024 * 1024)
        model: list[tuple[int, int]] = []
        timestamp, offset = -1, BASE
        for ts_step, offset_step in candidates:
            timestamp += ts_step
            offset += offset_step
            added = index.maybe_append(timestamp, offset)
            should_add = not model or timestamp > model[-1][0]
            assert added == should_add
            if should_add:
                model.append((timestamp, offset))
        keys = [t for t, _ in model]
        for target in targets:
            i = bisect.bisect_right(keys, target) - 1
            expected = (NO_TIMESTAMP, BASE) if i < 0 else model[i]
            assert index.lookup(target) == expected
        assert index.last_entry == (model[-1] if model else (NO_TIMESTAMP, BASE))
        index.close()

        loaded = TimeIndex.load(path, BASE, 10 * 1024 * 1024)
        assert loaded is not None and loaded.entries() == model
        last = TimeIndex.read_last_entry(path)
        assert last == ((model[-1][0], model[-1][1] - BASE) if model else None)

        loaded.truncate_to(truncate)
        kept = [(t, o) for t, o in model if o < truncate]
        assert loaded.entries() == kept
        loaded.close()
        again = TimeIndex.load(path, BASE, 10 * 1024 * 1024)
        assert again is not None and again.entries() == kept


def test_time_index_rejects_torn_file(tmp_path):
    path = tmp_path / "00000000000000000000.timeindex"
    index = TimeIndex(path, 0, 1 << 20)
    index.maybe_append(10, 1)
    index.close()
    path.write_bytes(path.read_bytes() + b"\x01")
    assert TimeIndex.load(path, 0, 1 << 20) is None
    assert TimeIndex.read_last_entry(path) is None
