"""Kafka's error codes: the one source for the whole code base.

kio's `ErrorCode` is generated from Kafka's own specs (an IntEnum, so a member is the wire integer;
names are Kafka's in lower case: `ErrorCode.unknown_topic_or_partition` is 3). Code that answers with
an error code names it through this module, never as a bare integer, so that one grep finds every
place an error is produced and a renamed or new code is one edit here.

`ApiError` is the base of the exceptions below the shell that a request can meet and that Kafka
answers with a code of its own (a topic that exists, an offset out of range, a corrupt batch, a bad
config value): each subclass names its code once, as a class attribute, the way Kafka's
`ApiException` subclasses map to `Errors`, and the handlers answer `exc.error_code` instead of
keeping their own table.
"""

from __future__ import annotations

from typing import ClassVar

from kio.schema.errors import ErrorCode

__all__ = ["ApiError", "ErrorCode"]


class ApiError(Exception):
    """An error a request is answered with: `error_code` is Kafka's code for it, `str(exc)` the
    error message."""

    error_code: ClassVar[ErrorCode] = ErrorCode.unknown_server_error
