"""The authorizer's section of the cluster metadata image: ACL bindings by id, and the records that
change them (Kafka's AclsImage, AclControlManager's replay, and metadata/src/main/resources/common/
metadata/AccessControlEntryRecord.json and RemoveAccessControlEntryRecord.json).

    AccessControlEntryRecord        one binding, with its id: the resource pattern (resource type,
                                    name, pattern type) and the entry (principal, host, operation,
                                    permission type), each enum as Kafka's code (ResourceType,
                                    PatternType, AclOperation, AclPermissionType)
    RemoveAccessControlEntryRecord  the binding of that id removed

CreateAcls and DeleteAcls are answered once their records are in the metadata log (durable: the log
fsyncs each change), so ACLs survive a restart and kill -9 as everything else in the image; a
snapshot writes every binding as its AccessControlEntryRecord. Replaying a binding whose id exists,
or removing one that does not, is damage (ValueError, as Kafka's AclControlManager throws).

The section registers itself (minibroker.storage.metadata_image.register_section) when this module
is imported; minibroker.storage.metadata_log imports it, so every image read from a log has it.
What a binding means is the authorizer's (minibroker.acls); this module only keeps them.

No I/O, no clock, no trio.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Iterator

from minibroker.storage.metadata_image import ImageSection, MetadataRecord, record_type, register_section

__all__ = ["AccessControlEntryRecord", "AclsImage", "RemoveAccessControlEntryRecord"]


@record_type
@dataclass(frozen=True, slots=True)
class AccessControlEntryRecord(MetadataRecord):
    id: uuid.UUID
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@record_type
@dataclass(frozen=True, slots=True)
class RemoveAccessControlEntryRecord(MetadataRecord):
    id: uuid.UUID


@register_section
class AclsImage(ImageSection):
    """id -> the binding's record, in the order they were added."""

    handles = (AccessControlEntryRecord, RemoveAccessControlEntryRecord)

    def __init__(self) -> None:
        self.acls: dict[uuid.UUID, AccessControlEntryRecord] = {}

    def apply(self, record: MetadataRecord) -> None:
        if isinstance(record, AccessControlEntryRecord):
            if record.id in self.acls:
                raise ValueError(f"AccessControlEntryRecord for ACL {record.id}, which exists")
            self.acls[record.id] = record
        else:
            assert isinstance(record, RemoveAccessControlEntryRecord)
            if self.acls.pop(record.id, None) is None:
                raise ValueError(f"RemoveAccessControlEntryRecord for ACL {record.id}, which does not exist")

    def records(self) -> Iterator[MetadataRecord]:
        yield from self.acls.values()
