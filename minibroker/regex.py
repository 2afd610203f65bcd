"""Regular expressions that clients send (KIP-848 subscribed topic patterns, ListTransactions'
transactional id pattern), compiled by RE2 (google-re2).

Matching with RE2 takes time linear in the subject, so no client's pattern can stall the event
loop; Python's backtracking `re` cannot promise that (`(a|a)*b` against a long name runs for
minutes). Kafka uses RE2/J for topic patterns, the same syntax; for ListTransactions it uses
java.util.regex, so backreferences and lookarounds, which RE2 refuses, are refused here
(INVALID_REGULAR_EXPRESSION) where Kafka would accept them: a difference on purpose (docs/differences.md).
"""

from __future__ import annotations

import re2

__all__ = ["RegexError", "compile_client_regex"]

RegexError = re2.error

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a client's bad pattern is answered INVALID_REGULAR_EXPRESSION, not logged by RE2


def compile_client_regex(pattern: str) -> re2._Regexp:
    """`pattern` compiled by RE2; RegexError when it is not one RE2 accepts."""
    return re2.compile(pattern, _OPTIONS)
