"""API names and error codes as tests give them: Kafka's names ("JoinGroup"), the handlers' snake
case ("join_group") or keys; codes as numbers or Kafka's names ("NOT_LEADER_OR_FOLLOWER")."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from minibroker.protocol.messages import api_name, kio_versions


class ControlError(ValueError):
    """A control that cannot be carried out; the message names the verb, API or broker at fault."""


def _norm(name: str) -> str:
    return name.replace("_", "").replace("-", "").lower()


def _all_api_names() -> dict[str, int]:
    names = {}
    for key in range(0, 100):
        if kio_versions(key) is not None:
            names[_norm(api_name(key))] = key
    return names


_API_KEYS: dict[str, int] | None = None


def api_key_of(api: str | int) -> int:
    """The API key of a name as Kafka spells it ("JoinGroup"), in snake case ("join_group") or a key
    ("11", 11). Raises ControlError naming an unknown API."""
    global _API_KEYS
    if isinstance(api, int) or (isinstance(api, str) and api.strip().isdigit()):
        key = int(api)
        if kio_versions(key) is None:
            raise ControlError(f"unknown API key {key}")
        return key
    if _API_KEYS is None:
        _API_KEYS = _all_api_names()
    found = _API_KEYS.get(_norm(api))
    if found is None:
        raise ControlError(f"unknown API {api!r} (Kafka's name, e.g. Produce or JoinGroup, or an API key)")
    return found


def api_matches(api: str | int, name: str, key: int) -> bool:
    return api_key_of(api) == key


def error_code_of(code: int | str) -> int:
    """An error code from its number or Kafka's name (NOT_LEADER_OR_FOLLOWER, not_leader_or_follower)."""
    if isinstance(code, int) or str(code).lstrip("-").isdigit():
        value = int(code)
    else:
        try:
            value = ErrorCode[str(code).strip().lower()].value
        except KeyError:
            raise ControlError(f"unknown error code {code!r} (a number or Kafka's name, e.g. NOT_LEADER_OR_FOLLOWER)") from None
    try:
        ErrorCode(value)
    except ValueError:
        raise ControlError(f"unknown error code {value}") from None
    return value
