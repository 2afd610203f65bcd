"""The server-side task assignor of streams groups: Kafka 4.4's StickyTaskAssignor ("sticky", the
only built-in one, group.streams.assignors).

Tasks are spread over processes (a Streams instance: its members share a process id) by load
(tasks per member of the process), then over the process's members:

1. active tasks, in (partition, subtopology) order, stay with the member that had them while it is
   under its quota (ceil(active tasks / members), recomputed as members fill up);
2. then with a member that had them as a standby (or reported offsets for them), the least loaded;
3. the rest, in (subtopology, partition) order, go to the least loaded process's least loaded member;
4. with `num.standby.replicas` > 0, each stateful task (a subtopology with changelog topics) gets
   that many standbys on processes that do not hold it: first its previous active owner, then its
   previous standby owners (preferring the member that had it as a standby, then the most offsets
   restored), then the least loaded process; a standby that finds no process is left out, with
   Kafka's warning.

Pure; ties are broken by member and process id, in order (Kafka's iterates hash maps).
"""

from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass, field
from typing import Mapping

log = logging.getLogger(__name__)

TaskId = tuple[str, int]  # (subtopology id, partition)


class TaskAssignorError(Exception):
    """No member could take a task (Kafka's TaskAssignorException)."""


@dataclass(frozen=True)
class MemberSpec:
    process_id: str
    active: Mapping[str, frozenset[int]]  # its current tasks (Kafka's MemberAssignmentState)
    standby: Mapping[str, frozenset[int]]
    task_offsets: Mapping[str, Mapping[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class SubtopologySpec:
    tasks: int
    stateful: bool


class _Process:
    def __init__(self, process_id: str) -> None:
        self.process_id = process_id
        self.capacity = 0
        self.task_count = 0
        self.members: dict[str, int] = {}  # member -> task count
        self.active: dict[str, set[TaskId]] = {}
        self.standby: dict[str, set[TaskId]] = {}
        self.tasks: set[TaskId] = set()

    @property
    def load(self) -> float:
        return self.task_count / self.capacity if self.capacity > 0 else -1.0

    def add_member(self, member_id: str) -> None:
        self.members[member_id] = 0
        self.capacity += 1

    def add(self, member_id: str, task: TaskId, active: bool) -> int:
        self.task_count += 1
        self.tasks.add(task)
        (self.active if active else self.standby).setdefault(member_id, set()).add(task)
        self.members[member_id] += 1
        return self.members[member_id]

    def add_to_least_loaded(self, task: TaskId, active: bool) -> int:
        if not self.members:
            return -1
        member_id = min(self.members, key=lambda m: (self.members[m], m))
        return self.add(member_id, task, active)


class _State:
    def __init__(self, num_standby: int) -> None:
        self.num_standby = num_standby
        self.processes: dict[str, _Process] = {}
        self.prev_active: dict[TaskId, tuple[str, str]] = {}  # task -> (process, member)
        self.prev_standby: dict[TaskId, list[tuple[str, str]]] = {}
        self.total_active = self.total_tasks = 0
        self.members_with_active_capacity = self.members_with_capacity = 0
        self.active_per_member = self.tasks_per_member = 0

    def filled_active(self, count: int) -> None:
        if count == self.active_per_member:
            self.members_with_active_capacity -= 1
            self.total_active -= count
            self.active_per_member = _per_member(self.total_active, self.members_with_active_capacity)

    def filled(self, count: int) -> None:
        if count == self.tasks_per_member:
            self.members_with_capacity -= 1
            self.total_tasks -= count
            self.tasks_per_member = _per_member(self.total_tasks, self.members_with_capacity)


def _per_member(tasks: int, members: int) -> int:
    return 0 if members == 0 else -(-tasks // members)


def assign(members: Mapping[str, MemberSpec], subtopologies: Mapping[str, SubtopologySpec], num_standby: int
           ) -> dict[str, tuple[dict[str, frozenset[int]], dict[str, frozenset[int]]]]:
    """member id -> (active tasks, standby tasks), every member present."""
    state = _State(num_standby)
    for sub_spec in subtopologies.values():
        state.total_tasks += sub_spec.tasks + (sub_spec.tasks * num_standby if sub_spec.stateful else 0)
        state.total_active += sub_spec.tasks
    state.members_with_active_capacity = state.members_with_capacity = len(members)
    state.active_per_member = _per_member(state.total_active, len(members))
    state.tasks_per_member = _per_member(state.total_tasks, len(members))
    candidates: dict[TaskId, list[tuple[int, int, str, str]]] = {}
    for member_id in sorted(members):
        spec = members[member_id]
        state.processes.setdefault(spec.process_id, _Process(spec.process_id)).add_member(member_id)
        for sub, ps in spec.active.items():
            for p in ps:
                state.prev_active[(sub, p)] = (spec.process_id, member_id)
        for sub, ps in spec.standby.items():
            for p in ps:
                offset = spec.task_offsets.get(sub, {}).get(p, 0)
                candidates.setdefault((sub, p), []).append((0, -offset, spec.process_id, member_id))
        for sub, offsets in spec.task_offsets.items():
            for p, offset in offsets.items():
                if p not in spec.standby.get(sub, ()):
                    candidates.setdefault((sub, p), []).append((1, -offset, spec.process_id, member_id))
    state.prev_standby = {task: [(c[2], c[3]) for c in sorted(cs, key=lambda c: (c[0], c[1]))]
                          for task, cs in candidates.items()}

    active_tasks = [(sub, p) for sub in sorted(subtopologies) for p in range(subtopologies[sub].tasks)]
    _assign_active(state, active_tasks)
    if num_standby > 0:
        stateful = [(sub, p) for sub in sorted(subtopologies) if subtopologies[sub].stateful
                    for p in range(subtopologies[sub].tasks)]
        _assign_standby(state, stateful)

    result = {}
    for member_id in members:
        active: dict[str, set[int]] = {}
        standby: dict[str, set[int]] = {}
        for process in state.processes.values():
            for sub, p in process.active.get(member_id, ()):
                active.setdefault(sub, set()).add(p)
            for sub, p in process.standby.get(member_id, ()):
                standby.setdefault(sub, set()).add(p)
        result[member_id] = ({s: frozenset(ps) for s, ps in active.items()},
                             {s: frozenset(ps) for s, ps in standby.items()})
    return result


def _least_loaded_previous(state: _State, previous: list[tuple[str, str]] | None, standby_of: TaskId | None
                           ) -> tuple[str, str] | None:
    if not previous:
        return None
    chosen = None
    best_process = best_member = float("inf")
    for process_id, member_id in previous:
        process = state.processes[process_id]
        if standby_of is not None and standby_of in process.tasks:
            continue
        load, member_load = process.load, process.members[member_id]
        if chosen is None or (load < best_process and member_load < best_member):
            chosen, best_process, best_member = (process_id, member_id), load, member_load
    return chosen


def _assign_active(state: _State, tasks: list[TaskId]) -> None:
    remaining = sorted(tasks, key=lambda t: (t[1], t[0]))
    left = []
    for task in remaining:
        prev = state.prev_active.get(task)
        if prev is not None:
            process = state.processes[prev[0]]
            if process.members[prev[1]] < state.active_per_member:
                n = process.add(prev[1], task, True)
                state.filled_active(n)
                state.filled(n)
                continue
        left.append(task)
    rest = []
    for task in left:
        prev = _least_loaded_previous(state, state.prev_standby.get(task), None)
        if prev is not None:
            process = state.processes[prev[0]]
            if process.members[prev[1]] < state.active_per_member:
                n = process.add(prev[1], task, True)
                state.filled_active(n)
                state.filled(n)
                continue
        rest.append(task)
    queue = [(p.load, pid) for pid, p in state.processes.items()]
    heapq.heapify(queue)
    for task in sorted(rest):
        if not queue:
            raise TaskAssignorError(f"No process available to assign active task {task[0]}_{task[1]}.")
        _, pid = heapq.heappop(queue)
        n = state.processes[pid].add_to_least_loaded(task, True)
        if n == -1:
            raise TaskAssignorError(f"No member available to assign active task {task[0]}_{task[1]}.")
        state.filled_active(n)
        state.filled(n)
        heapq.heappush(queue, (state.processes[pid].load, pid))


def _assign_standby(state: _State, tasks: list[TaskId]) -> None:
    to_least_loaded: list[tuple[TaskId, int]] = []
    for task in sorted(tasks, key=lambda t: (t[1], t[0]), reverse=True):
        placed = 0
        while placed < state.num_standby:
            prev = state.prev_active.get(task)
            if prev is not None:
                process = state.processes[prev[0]]
                if task not in process.tasks and process.members[prev[1]] < state.tasks_per_member:
                    state.filled(process.add(prev[1], task, False))
                    placed += 1
                    continue
            candidate = _least_loaded_previous(state, state.prev_standby.get(task), task)
            if candidate is None:
                break
            process = state.processes[candidate[0]]
            if process.members[candidate[1]] >= state.tasks_per_member:
                break
            state.filled(process.add(candidate[1], task, False))
            placed += 1
        to_least_loaded.append((task, state.num_standby - placed))
    for task, replicas in sorted(to_least_loaded, key=lambda x: x[0], reverse=True):
        for i in range(replicas):
            if not _standby_to_least_loaded(state, task):
                log.warning("Unable to assign %d of %d standby tasks for task [%s_%d]. There is not enough available "
                            "capacity. You should increase the number of threads and/or application instances to "
                            "maintain the requested number of standby replicas.",
                            state.num_standby - i, state.num_standby, task[0], task[1])
                break


def _standby_to_least_loaded(state: _State, task: TaskId) -> bool:
    for process in sorted(state.processes.values(), key=lambda p: (p.load, p.process_id)):
        if task not in process.tasks:
            n = process.add_to_least_loaded(task, False)
            if n != -1:
                state.filled(n)
                return True
    return False
