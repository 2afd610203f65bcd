"""The group coordinator: Kafka's classic group protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup),
KIP-848's consumer group protocol (ConsumerGroupHeartbeat/ConsumerGroupDescribe), committed offsets,
ListGroups/DescribeGroups/DeleteGroups, for every group (this broker coordinates them all). Split
the way Kafka's group-coordinator module is:

    api.py              GroupConfig, the requests and answers (JoinResult, Pending, ...), the Group
                        interface, the TopicsImage consumer groups resolve subscriptions against
    classic_group.py    ClassicGroup / ClassicGroupMember and the state table (pure data and rules)
    classic_manager.py  the classic protocol's requests and timeouts (GroupMetadataManager's part)
    consumer_group.py   ConsumerGroup / ConsumerGroupMember and the reconciliation (pure)
    consumer_manager.py the consumer protocol's requests and timeouts (GroupMetadataManager's part)
    assignors.py        the server-side assignors of consumer groups: uniform and range
    offsets.py          OffsetMetadataManager: commits, fetches, deletes, retention (any group type)
    types.py            GroupType, GroupTypeManager, GroupTypes: what a group type gives the shard
    registry.py         the default group types (classic, consumer)
    runtime.py          ShardRuntime: what a type's manager may use of the shard
    shard.py            GroupCoordinatorShard: the groups, timers, load, list, delete (pure)
    coordinator.py      GroupCoordinator: the trio shell, clocks, the purgatory, the timer task

A new group type is new files (its group, its manager, its records, its handlers) and an entry in
the registry; the shard and the offsets store are keyed by group type (types.py).

Only coordinator.py imports trio or reads a clock; the rest takes `now` (monotonic seconds) and
`now_ms` (wall-clock milliseconds) as arguments. Import from the module that defines a name.
"""
