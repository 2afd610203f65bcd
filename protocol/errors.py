"""Kafka's error codes: the one source for the whole code base.

kio's `ErrorCode` is generated from Kafka's own specs (an IntEnum, so a member is the wire integer;
names are Kafka's in lower case: `ErrorCode.unknown_topic_or_partition` is 3). Code that answers with
an error code names it through this module, never as a bare integer, so that one grep finds every
place an error is produced and a renamed or new code is one edit here.
"""

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode"]
