"""The group coordinator: Kafka's classic group protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup),
committed offsets, ListGroups/DescribeGroups/DeleteGroups, for every group (this broker coordinates
them all). Split the way Kafka's group-coordinator module is:

    api.py              GroupConfig, the answers (JoinResult, Pending, ...), the Group interface
    classic_group.py    ClassicGroup / ClassicGroupMember and the state table (pure data and rules)
    classic_manager.py  the classic protocol's requests and timeouts (GroupMetadataManager's part)
    offsets.py          OffsetMetadataManager: commits, fetches, deletes, retention (any group type)
    shard.py            GroupCoordinatorShard: the registry, timers, load, list, delete (pure)
    coordinator.py      GroupCoordinator: the trio shell, clocks, the purgatory, the timer task

Only coordinator.py imports trio or reads a clock; the rest takes `now` (monotonic seconds) and
`now_ms` (wall-clock milliseconds) as arguments. Import from the module that defines a name.
"""
