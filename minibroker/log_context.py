"""Log lines that name their broker: "[broker 0] registered 3 partition(s) ...", as Kafka's
LogContext prefixes its lines ("[Broker id=0] ..."), so that the lines of several brokers in one
process (a test's cluster) can be told apart.

The broker a piece of work belongs to is a context variable: `broker_log_context(node_id)` sets it
for a block (Broker sets it while it opens and closes its data directory; the server for the task
that serves a broker, so every task started from there: connections, background work, timers).
trio hands a task's context to the tasks it starts and to `trio.to_thread` work; thread pools are
handed it with `in_current_context`. A log record made while it is set, by a logger of the
`minibroker` package, has the prefix in front of its message and the id in `record.broker_id`
(None elsewhere), for formats that want it as a field. Records of other loggers are left alone.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
from typing import Any, Callable, Iterator, TypeVar

__all__ = ["broker_log_context", "current_broker", "in_current_context"]

T = TypeVar("T")

_BROKER: contextvars.ContextVar[int | None] = contextvars.ContextVar("minibroker_broker", default=None)


def current_broker() -> int | None:
    """The node id of the broker whose work this is, if any."""
    return _BROKER.get()


@contextlib.contextmanager
def broker_log_context(node_id: int) -> Iterator[None]:
    """Log lines made in this block (and in the tasks it starts) name broker `node_id`."""
    token = _BROKER.set(node_id)
    try:
        yield
    finally:
        _BROKER.reset(token)


def in_current_context(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn` to run in another thread with a copy of this one's context (so its log lines name the
    same broker); a copy per call, as one context cannot run in two threads at once."""
    context = contextvars.copy_context()

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> T:
        return context.copy().run(fn, *args, **kwargs)

    return run


_previous_factory = logging.getLogRecordFactory()


def _record_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
    record = _previous_factory(*args, **kwargs)
    node_id = _BROKER.get()
    record.broker_id = node_id
    if node_id is not None and record.name.startswith("minibroker"):
        record.msg = f"[broker {node_id}] {record.msg}"
    return record


if not getattr(logging.getLogRecordFactory(), "_minibroker", False):
    _record_factory._minibroker = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(_record_factory)
