"""Quota groups: several users and client ids share one quota (KIP-257, scenario 1).

"It is useful to define a quota group that combines multiple user principals and/or client-ids. All
the requests from the group may then share a single quota." Settings::

    client.quota.callback.class=minibroker.quotas.examples.group_quota:GroupQuotaCallback
    client.quota.callback.group.analytics=user:alice,user:bob,client-id:nightly-report
    client.quota.callback.group.ingest=client-id:loader-1,client-id:loader-2

and the group's quotas are set on the user entity named after the group, with the usual tools (as
Kafka's own grouped-quota test callback does), e.g.::

    minibroker configs --bootstrap-server HOST:PORT --alter \\
        --add-config producer_byte_rate=1048576,request_percentage=50 --entity-type users --entity-name analytics

Rules:

- A request belongs to the group listing its user (``user:NAME``, the principal's name without
  ``User:``); failing that, to the group listing its client id (``client-id:NAME``). A member may be
  listed in one group only.
- For a quota type the group has a value for, every member shares one sensor, tagged
  ``{"user": "", "client-id": "", "group": NAME}``: what one member uses, the others cannot. Its
  limit is the group's value.
- For a type the group has no value for, and for everyone outside a group, Kafka's default
  <user, client-id> precedence applies (``DefaultQuotaCallback``). Give groups names no user has:
  a user of the same name would also get the group's value as its own user quota.

Setting or removing a group's value takes effect at once: the broker re-reads live limits after
each quota change, and members' tags are recomputed on every request for a custom callback.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from minibroker.quotas.callback import CLIENT_ID_TAG, USER_TAG, ClientQuotaEntity, DefaultQuotaCallback, QuotaType

__all__ = ["GROUP_CONFIG_PREFIX", "GROUP_TAG", "GroupQuotaCallback"]

GROUP_CONFIG_PREFIX: Final = "client.quota.callback.group."
GROUP_TAG: Final = "group"
_MEMBER_TYPES = ("user", "client-id")


class GroupQuotaCallback(DefaultQuotaCallback):
    """Members of a group share the group's quota; everyone else gets Kafka's defaults."""

    def __init__(self) -> None:
        super().__init__()
        self.groups: dict[str, tuple[tuple[str, str], ...]] = {}  # name -> ((member type, name), ...)
        self._group_of_user: dict[str, str] = {}
        self._group_of_client: dict[str, str] = {}

    def configure(self, configs: Mapping[str, Any]) -> None:
        """Read every ``client.quota.callback.group.<name>`` setting; ValueError names a bad one."""
        for key in sorted(configs):
            if not key.startswith(GROUP_CONFIG_PREFIX):
                continue
            group = key[len(GROUP_CONFIG_PREFIX):]
            if not group:
                raise ValueError(f"{key}: the group needs a name after {GROUP_CONFIG_PREFIX!r}")
            members = []
            for item in (part.strip() for part in str(configs[key]).split(",")):
                if not item:
                    continue
                member_type, sep, name = item.partition(":")
                if not sep or member_type not in _MEMBER_TYPES or not name:
                    raise ValueError(f"{key}: member {item!r} is not user:NAME or client-id:NAME")
                index = self._group_of_user if member_type == "user" else self._group_of_client
                if index.get(name, group) != group:
                    raise ValueError(f"{key}: {item} is already a member of group {index[name]!r}")
                index[name] = group
                members.append((member_type, name))
            if not members:
                raise ValueError(f"{key}: group {group!r} has no members")
            self.groups[group] = tuple(members)

    def group_of(self, user: str, client_id: str) -> str | None:
        """The group a request from (user, client id) belongs to, or None."""
        group = self._group_of_user.get(user)
        return group if group is not None else self._group_of_client.get(client_id)

    def group_limit(self, quota_type: QuotaType, group: str) -> float | None:
        """The value set on the user entity named after the group."""
        return self.configured(quota_type, ClientQuotaEntity.of(user=group))

    def quota_metric_tags(self, quota_type: QuotaType, principal: str, client_id: str) -> dict[str, str]:
        group = self.group_of(principal, client_id)
        if group is not None and self.group_limit(quota_type, group) is not None:
            return {USER_TAG: "", CLIENT_ID_TAG: "", GROUP_TAG: group}
        return super().quota_metric_tags(quota_type, principal, client_id)

    def quota_limit(self, quota_type: QuotaType, metric_tags: Mapping[str, str]) -> float | None:
        group = metric_tags.get(GROUP_TAG)
        if group is not None:
            return self.group_limit(quota_type, group)
        return super().quota_limit(quota_type, metric_tags)
