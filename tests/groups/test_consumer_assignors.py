"""The KIP-848 server-side assignors (minibroker/groups/assignors.py), by Hypothesis, against the
properties Kafka states for them:

* every assignor: each partition of a subscribed topic goes to exactly one member, and only to a
  member subscribed to its topic; nothing else is assigned;
* uniform, homogeneous subscriptions: partition counts differ by at most one (balance), every
  member keeps min(its valid current partitions, floor(P/N)) of them (stickiness), an assignment
  that is already valid and balanced comes back unchanged, and no other valid assignment moves
  fewer partitions (checked against the exact minimum);
* uniform, heterogeneous subscriptions: no partition could move to an eligible member holding at
  least two fewer (no single move makes it fairer), and current partitions stay unless that
  balancing takes them;
* range: per topic, each subscribed member gets floor or ceil of its share, in contiguous ranges,
  static members first by instance id; co-partitioned when every member subscribes to the same
  topics of equal partition counts.
"""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.groups.assignors import MemberSpec, range_assignor, uniform

TOPICS = [uuid.UUID(int=i + 1) for i in range(4)]


@st.composite
def groups(draw, homogeneous: bool | None = None):
    """(members, partitions): topics with 1-12 partitions, 1-7 members with subscriptions and a
    current assignment drawn from anything (stale, overlapping, of unsubscribed topics)."""
    topics = draw(st.lists(st.sampled_from(TOPICS), min_size=1, max_size=4, unique=True))
    partitions = {t: draw(st.integers(1, 12)) for t in topics}
    # Topics that no longer exist may still be in a current assignment.
    ghost = uuid.UUID(int=99)
    n = draw(st.integers(1, 7))
    if homogeneous is None:
        homogeneous = draw(st.booleans())
    shared = frozenset(draw(st.lists(st.sampled_from(topics), min_size=1, unique=True)))
    members = {}
    for i in range(n):
        subscribed = shared if homogeneous else frozenset(draw(st.lists(st.sampled_from(topics), unique=True)))
        current = {}
        for t in draw(st.lists(st.sampled_from(topics + [ghost]), unique=True, max_size=3)):
            current[t] = frozenset(draw(st.lists(st.integers(0, 14), max_size=6)))
        instance = draw(st.one_of(st.none(), st.sampled_from(["i-a", "i-b", "i-c", "i-d"])))
        members[f"m{i:02d}"] = MemberSpec(subscribed, {t: ps for t, ps in current.items() if ps}, instance)
    # Instance ids are unique in a group.
    seen: set[str] = set()
    for member_id, spec in list(members.items()):
        if spec.instance_id in seen:
            members[member_id] = MemberSpec(spec.topics, spec.assignment, None)
        elif spec.instance_id is not None:
            seen.add(spec.instance_id)
    return members, partitions


def check_valid(members, partitions, result):
    """Every subscribed partition exactly once, to a subscriber, and nothing else."""
    assert set(result) == set(members)
    owners: dict[tuple[uuid.UUID, int], str] = {}
    for member_id, assignment in result.items():
        for topic_id, ps in assignment.items():
            assert ps, "no empty topic entries"
            assert topic_id in members[member_id].topics, f"{member_id} got a topic it does not subscribe to"
            for p in ps:
                assert 0 <= p < partitions[topic_id]
                assert (topic_id, p) not in owners, f"{topic_id}-{p} given to {owners[(topic_id, p)]} and {member_id}"
                owners[(topic_id, p)] = member_id
    subscribed = set().union(*(spec.topics for spec in members.values()))
    assert set(owners) == {(t, p) for t in subscribed for p in range(partitions[t])}


def loads(result) -> dict[str, int]:
    return {m: sum(len(ps) for ps in a.values()) for m, a in result.items()}


def valid_uniform(members, partitions) -> tuple[dict, dict[str, int]]:
    """The uniform assignor's answer, checked valid, and each member's number of partitions."""
    result = uniform(members, partitions)
    check_valid(members, partitions, result)
    return result, loads(result)


def holding(members, result) -> dict[str, MemberSpec]:
    """The same members, each now holding what `result` gave it (the next rebalance's input)."""
    return {m: MemberSpec(spec.topics, result[m], spec.instance_id) for m, spec in members.items()}


def valid_current(members, partitions) -> dict[str, set]:
    """Each member's current partitions it may keep (the assignors' own notion, recomputed here:
    subscribed, existing, and not claimed by a member with a smaller id)."""
    claimed, kept = set(), {}
    for m in sorted(members):
        spec = members[m]
        mine = set()
        for t, ps in spec.assignment.items():
            if t in spec.topics and t in partitions:
                for p in ps:
                    if p < partitions[t] and (t, p) not in claimed:
                        claimed.add((t, p))
                        mine.add((t, p))
        kept[m] = mine
    return kept


def flat(assignment) -> set:
    return {(t, p) for t, ps in assignment.items() for p in ps}


@settings(max_examples=300, deadline=None)
@given(groups(homogeneous=True))
def test_uniform_homogeneous_is_valid_balanced_and_sticky(group):
    members, partitions = group
    result, counts = valid_uniform(members, partitions)
    assert max(counts.values()) - min(counts.values()) <= 1
    total = sum(counts.values())
    floor = total // len(members)
    current = valid_current(members, partitions)
    for m in members:
        assert len(flat(result[m]) & current[m]) >= min(len(current[m]), floor), m
    # The fewest moves: keep min(current, quota) with the ceil quotas on the members holding most.
    ranked = sorted((len(c) for c in current.values()), reverse=True)
    extra = total % len(members)
    best = sum(min(c, floor + (1 if i < extra else 0)) for i, c in enumerate(ranked))
    kept = sum(len(flat(result[m]) & current[m]) for m in members)
    assert kept == best


@settings(max_examples=200, deadline=None)
@given(groups(homogeneous=True))
def test_uniform_returns_a_balanced_valid_assignment_unchanged(group):
    members, partitions = group
    first = uniform(members, partitions)
    assert uniform(holding(members, first), partitions) == first


@settings(max_examples=300, deadline=None)
@given(groups(homogeneous=False))
def test_uniform_heterogeneous_is_valid_and_no_single_move_is_fairer(group):
    members, partitions = group
    result, counts = valid_uniform(members, partitions)
    for giver, assignment in result.items():
        for topic_id in assignment:
            for taker, spec in members.items():
                if topic_id in spec.topics:
                    assert counts[taker] + 1 >= counts[giver], (
                        f"{topic_id} could move from {giver} ({counts[giver]}) to {taker} ({counts[taker]})")
    # Stability: the answer is its own fixed point.
    assert uniform(holding(members, result), partitions) == result


@settings(max_examples=300, deadline=None)
@given(groups())
def test_range_gives_contiguous_fair_ranges_static_members_first(group):
    members, partitions = group
    result = range_assignor(members, partitions)
    check_valid(members, partitions, result)
    order = sorted(members, key=lambda m: (0, members[m].instance_id, m) if members[m].instance_id else (1, "", m))
    for topic_id, count in partitions.items():
        subscribed = [m for m in order if topic_id in members[m].topics]
        if not subscribed:
            continue
        share = [sorted(result[m].get(topic_id, ())) for m in subscribed]
        assert [p for ps in share for p in ps] == list(range(count)), "contiguous, in member order"
        sizes = [len(ps) for ps in share]
        base, extra = divmod(count, len(subscribed))
        assert sizes == [base + (1 if i < extra else 0) for i in range(len(subscribed))]


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 6), st.integers(1, 10), st.integers(1, 3))
def test_range_co_partitions_topics_of_equal_size(n, count, topics):
    partitions = {t: count for t in TOPICS[:topics]}
    members = {f"m{i}": MemberSpec(frozenset(partitions)) for i in range(n)}
    result = range_assignor(members, partitions)
    for assignment in result.values():
        shares = {frozenset(assignment.get(t, ())) for t in partitions}
        assert len(shares) == 1, "the same partition numbers of every topic"


def test_uniform_moves_the_fewest_partitions_when_a_member_joins():
    t = TOPICS[0]
    members = {"a": MemberSpec(frozenset({t}), {t: frozenset({0, 1, 2})}),
               "b": MemberSpec(frozenset({t}), {t: frozenset({3, 4, 5})}),
               "c": MemberSpec(frozenset({t}))}
    result = uniform(members, {t: 6})
    assert len(result["a"][t] & {0, 1, 2}) == 2 and len(result["b"][t] & {3, 4, 5}) == 2
    assert len(result["c"][t]) == 2


def test_no_members_no_assignment():
    assert uniform({}, {TOPICS[0]: 3}) == {} == range_assignor({}, {TOPICS[0]: 3})
