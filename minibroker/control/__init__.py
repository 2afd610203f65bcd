"""Tests in control of the broker: error stacks and hooks for any API, round-trip delays, request
capture, closing connections, the clock (minibroker.control.rules, .surface), over HTTP from any
language (minibroker.control.http) and from the command line (`minibroker control`). docs/control.md."""

from minibroker.control.rules import Answer, ControlError, Delay

__all__ = ["Answer", "ControlError", "Delay"]
