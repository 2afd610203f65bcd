"""Fault injection, so tests can force real client retries.

A rule picks requests by API (and optionally client id) and does one thing to every Nth of them,
AFTER the broker has handled the request (for Produce: after the append):

- `drop`: the response is never sent and the connection goes silent: nothing more is read or
  answered on it until the client times out and closes it (a TCP connection cannot lose one
  response and carry on, so this is how a lost response looks to a client).
- `close`: the connection is closed instead of answering (the client reconnects and retries).
- `delay`: the response is sent `delay_ms` late.
- `lose`: this response and those of the requests after it are lost in transit: the broker keeps
  reading and handling the connection's requests (appending produced batches) but writes nothing
  back, then the connection breaks, after `count` lost responses (default 10) or as soon as the
  client has sent nothing for 50 ms. A network fault as a producer with many requests in flight
  meets it: all the batches it had in flight are written without it learning so, and all are
  resent.
- `error` (any API): the request is NOT handled; it is answered `error_code` in every place its
  response carries an error (minibroker.control.responses: every partition of a Produce or Fetch,
  a Metadata v13+'s top-level error (KIP-1102: 129, REBOOTSTRAP_REQUIRED, sends a Kafka 4 client
  back to its bootstrap servers; before v13 each requested topic's), a JoinGroup's top-level
  error). The same answer as an error stack's (minibroker.control.rules), every Nth request. For
  studying what clients do with each error (DUPLICATE_SEQUENCE_NUMBER, OUT_OF_ORDER_SEQUENCE_NUMBER,
  INVALID_PRODUCER_EPOCH, REBOOTSTRAP_REQUIRED, ...).

Rules come from the broker config `fault.injection` (rules separated by `;`, fields by `:`), e.g.
`Produce:close:every=7:limit=20;Fetch:delay:delay_ms=300`, or in process:
`running.broker.faults.add(FaultRule("Produce", "drop", every=3))`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

ACTIONS = ("drop", "close", "delay", "error", "lose")


@dataclass
class FaultRule:
    api: str  # the API's name as in ApiVersions handlers: "Produce", "Fetch", ...
    action: str
    every: int = 1  # act on every Nth matching request (1: all of them)
    limit: int | None = None  # stop after this many faults
    delay_ms: int = 0
    count: int = 10  # lose: how many responses are lost
    error_code: int = 0
    client_id: str | None = None
    seen: int = field(default=0, init=False)
    fired: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"fault action must be one of {', '.join(ACTIONS)}, not {self.action!r}")
        if self.every < 1:
            raise ValueError(f"fault 'every' must be at least 1, not {self.every}")
        if self.action == "lose" and self.count < 1:
            raise ValueError("a lose fault needs count >= 1")
        if self.action == "delay" and self.delay_ms <= 0:
            raise ValueError("a delay fault needs delay_ms > 0")
        if self.action == "error" and self.error_code == 0:
            raise ValueError("an error fault needs a non-zero error_code")


def parse_rules(text: str) -> list[FaultRule]:
    """Parse the `fault.injection` config value; raises ValueError with the reason."""
    rules = []
    for chunk in filter(None, (c.strip() for c in text.split(";"))):
        api, _, rest = chunk.partition(":")
        action, _, options = rest.partition(":")
        kwargs: dict = {}
        for option in filter(None, options.split(":")):
            key, sep, value = option.partition("=")
            if not sep or key not in ("every", "limit", "delay_ms", "error_code", "client_id", "count"):
                raise ValueError(f"unknown fault option {option!r} in {chunk!r}")
            kwargs[key] = value if key == "client_id" else int(value)
        rules.append(FaultRule(api.strip(), action.strip(), **kwargs))
    return rules


def _api_name_key(name: str) -> str:
    return name.replace("_", "").lower()


class FaultInjector:
    def __init__(self, rules: list[FaultRule] | None = None) -> None:
        self.rules: list[FaultRule] = list(rules or [])

    def add(self, rule: FaultRule) -> FaultRule:
        self.rules.append(rule)
        return rule

    def clear(self) -> None:
        self.rules.clear()

    def before_request(self, api_name: str, client_id: str) -> FaultRule | None:
        """An `error` rule that answers this request instead of the broker, if one fires."""
        return self._fire(api_name, client_id, before=True)

    def after_request(self, api_name: str, client_id: str) -> FaultRule | None:
        """The drop/close/delay/lose rule that fires for this handled request, if any."""
        return self._fire(api_name, client_id, before=False)

    def _fire(self, api_name: str, client_id: str, before: bool) -> FaultRule | None:
        for rule in self.rules:
            if (rule.action == "error") != before:
                continue
            if _api_name_key(rule.api) != _api_name_key(api_name):
                continue
            if rule.client_id is not None and rule.client_id != client_id:
                continue
            if rule.limit is not None and rule.fired >= rule.limit:
                continue
            rule.seen += 1
            if rule.seen % rule.every == 0:
                rule.fired += 1
                log.info("fault injected: %s %s (#%d)", rule.action, api_name, rule.fired)
                return rule
        return None
