"""Helpers for the tests of damaged data directories and storage faults (docs/limits.md)."""

from __future__ import annotations


def sole_error(exc: BaseException) -> BaseException:
    """The one exception inside (possibly nested) exception groups, as a start-up failure raises it."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc
