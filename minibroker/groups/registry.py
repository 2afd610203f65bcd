"""The group types a broker's coordinator knows by default (groups/types.py): classic groups,
KIP-848 consumer groups, KIP-1071 streams groups and KIP-932 share groups, classic being the type
of simple groups (an OffsetCommit's without a group).
A coordinator may be given other types (`GroupCoordinator.open(..., types=DEFAULT_GROUP_TYPES.with_type(...))`);
a type the broker serves to every client joins the tuple here.
"""

from __future__ import annotations

from minibroker.groups.api import CLASSIC
from minibroker.groups.classic_manager import CLASSIC_GROUP_TYPE
from minibroker.groups.consumer_manager import CONSUMER_GROUP_TYPE
from minibroker.groups.share_manager import SHARE_GROUP_TYPE
from minibroker.groups.streams_manager import STREAMS_GROUP_TYPE
from minibroker.groups.types import GroupTypes

__all__ = ["DEFAULT_GROUP_TYPES"]

DEFAULT_GROUP_TYPES = GroupTypes((CLASSIC_GROUP_TYPE, CONSUMER_GROUP_TYPE, STREAMS_GROUP_TYPE, SHARE_GROUP_TYPE),
                                 simple=CLASSIC)
