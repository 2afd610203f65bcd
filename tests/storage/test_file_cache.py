"""The open-file cache and the descriptor budget (docs/storage.md) against a plain reference model.

The model is a list of open paths, least recently used first, plus pin counts and a count of the
connections' descriptors: Hypothesis drives the real FileCache (real files, real descriptors)
and the model through the same acquires, releases, pins, forgets, reclaims and connection
acquires, and after every step the two must agree on which files are open and in which order, the
budget's counts must match, and the process must hold exactly the descriptors the cache says (read
from /proc/self/fd). Every read goes through a descriptor the cache hands out, and must return the
file's own bytes: a descriptor closed by an eviction and reused for another file would show here.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from minibroker.storage.descriptors import DescriptorBudget
from minibroker.storage.file_cache import FileCache
from tests.support.broker_process import open_files_under

PATHS = 8
CAPACITY = 3
BUDGET = 5
CONNECTIONS_CAP = 4


class FileCacheModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory(prefix="file-cache-")
        self.dir = Path(self.tmp.name)
        self.paths = [str(self.dir / f"{i:020d}.log") for i in range(PATHS)]
        self.content = {p: b"" for p in self.paths}
        for p in self.paths:
            Path(p).write_bytes(b"")
        self.budget = DescriptorBudget(BUDGET)
        self.cache = FileCache(CAPACITY)
        self.cache.share = self.budget.share("files", CAPACITY, reclaim=self.cache.reclaim)
        self.connections = self.budget.share("connections", CONNECTIONS_CAP)
        # The model.
        self.lru: list[str] = []  # open paths, least recently used first
        self.pins: dict[str, int] = {}
        self.held_connections = 0

    def teardown(self) -> None:
        for path, pins in self.pins.items():
            for _ in range(pins):
                self.cache.release(path)
        self.cache.close_all()
        self.tmp.cleanup()

    # -- the model's rules ------------------------------------------------------------------------

    def _evict_model(self) -> bool:
        for path in self.lru:
            if not self.pins.get(path):
                self.lru.remove(path)
                return True
        return False

    def _model_acquire(self, path: str) -> bool:
        """What acquiring `path` does to the model; False when it must fail (out of descriptors)."""
        if path in self.lru:
            self.lru.remove(path)
            self.lru.append(path)
            return True
        while len(self.lru) >= CAPACITY:
            if not self._evict_model():
                break
        while len(self.lru) >= CAPACITY or len(self.lru) + self.held_connections >= BUDGET:
            if not self._evict_model():
                return False
        self.lru.append(path)
        return True

    # -- rules ------------------------------------------------------------------------------------

    @rule(i=st.integers(0, PATHS - 1), data=st.binary(min_size=1, max_size=16))
    def append(self, i: int, data: bytes) -> None:
        path = self.paths[i]
        expected = self._model_acquire(path)
        try:
            fd = self.cache.acquire(path)
        except OSError as exc:
            assert not expected and exc.errno == errno.EMFILE
            return
        assert expected
        try:
            os.write(fd, data)  # O_APPEND: lands at the end whatever the descriptor's history
        finally:
            self.cache.release(path)
        self.content[path] += data

    @rule(i=st.integers(0, PATHS - 1))
    def read(self, i: int) -> None:
        path = self.paths[i]
        expected = self._model_acquire(path)
        try:
            fd = self.cache.acquire(path)
        except OSError:
            assert not expected
            return
        assert expected
        try:
            assert os.pread(fd, 1 << 16, 0) == self.content[path]
        finally:
            self.cache.release(path)

    @rule(i=st.integers(0, PATHS - 1))
    def pin(self, i: int) -> None:
        path = self.paths[i]
        expected = self._model_acquire(path)
        try:
            self.cache.acquire(path)
        except OSError:
            assert not expected
            return
        assert expected
        self.pins[path] = self.pins.get(path, 0) + 1

    @precondition(lambda self: any(self.pins.values()))
    @rule(data=st.data())
    def unpin(self, data) -> None:
        path = data.draw(st.sampled_from(sorted(p for p, n in self.pins.items() if n)))
        self.pins[path] -= 1
        self.cache.release(path)

    @rule(i=st.integers(0, PATHS - 1))
    def forget(self, i: int) -> None:
        """What a segment's close or deletion does; never while the segment is in use."""
        path = self.paths[i]
        if self.pins.get(path):
            return
        self.cache.forget(path)
        if path in self.lru:
            self.lru.remove(path)

    @rule()
    def reclaim(self) -> None:
        assert self.cache.reclaim() == self._evict_model()

    @rule()
    def connect(self) -> None:
        """A connection draws on the same budget: idle files make room, pinned ones cannot."""
        if self.held_connections >= CONNECTIONS_CAP:
            expected = False
        else:
            expected = len(self.lru) + self.held_connections < BUDGET or self._evict_model()
        assert self.connections.try_acquire() == expected
        if expected:
            self.held_connections += 1

    @precondition(lambda self: self.held_connections > 0)
    @rule()
    def disconnect(self) -> None:
        self.connections.release()
        self.held_connections -= 1

    # -- invariants -------------------------------------------------------------------------------

    @invariant()
    def same_files_in_the_same_order(self) -> None:
        assert self.cache.open_paths() == self.lru

    @invariant()
    def the_budget_counts_what_is_open(self) -> None:
        assert self.cache.share.in_use == len(self.lru)
        assert self.connections.in_use == self.held_connections
        assert self.budget.in_use == len(self.lru) + self.held_connections <= BUDGET

    @invariant()
    def the_process_holds_exactly_those_descriptors(self) -> None:
        assert sorted(open_files_under(self.dir)) == sorted(self.lru)


TestFileCacheModel = FileCacheModel.TestCase
TestFileCacheModel.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


# -- the budget on its own ---------------------------------------------------------------------


def test_a_share_stays_under_its_cap_and_all_shares_under_the_capacity():
    budget = DescriptorBudget(5)
    files = budget.share("files", 3)
    connections = budget.share("connections", 4)
    assert [files.try_acquire() for _ in range(4)] == [True, True, True, False]
    assert [connections.try_acquire() for _ in range(3)] == [True, True, False]  # 5 in all
    files.release()
    assert connections.try_acquire() and budget.in_use == 5
    assert "files 2/3" in budget.describe() and "connections 3/4" in budget.describe()
    with pytest.raises(RuntimeError):
        budget.share("other", 1).release()
    connections.close()
    assert budget.in_use == 2


def test_a_full_budget_asks_the_other_shares_and_never_the_one_without_reclaim():
    budget = DescriptorBudget(2)
    given_back = []

    def reclaim() -> bool:
        if files.in_use:
            files.release()
            given_back.append(1)
            return True
        return False

    files = budget.share("files", 2, reclaim=reclaim)
    connections = budget.share("connections", 2)
    assert files.try_acquire() and files.try_acquire()
    assert connections.try_acquire() and given_back == [1]  # an idle file made room
    assert connections.try_acquire() and given_back == [1, 1]
    assert not connections.try_acquire()  # at its cap
    assert not files.try_acquire()  # a connection is never taken back
    assert connections.refused == 1 and files.refused == 1


def test_an_open_that_finds_no_descriptor_says_what_holds_them(tmp_path):
    budget = DescriptorBudget(2)
    cache = FileCache(2)
    cache.share = budget.share("files", 2, reclaim=cache.reclaim)
    connections = budget.share("connections", 2)
    paths = [tmp_path / f"{i}.log" for i in range(3)]
    for path in paths:
        path.write_bytes(b"x")
    cache.acquire(paths[0])
    cache.acquire(paths[1])  # both pinned
    with pytest.raises(OSError) as raised:
        cache.acquire(paths[2])
    assert raised.value.errno == errno.EMFILE and "files 2/2" in raised.value.strerror
    assert raised.value.filename == str(paths[2])
    assert not connections.try_acquire()  # pinned files cannot make room either
    cache.release(paths[0])
    assert connections.try_acquire() and cache.open_paths() == [str(paths[1])]
    cache.release(paths[1])
    cache.close_all()
    assert budget.in_use == 1
