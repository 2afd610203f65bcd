"""SASL/OAUTHBEARER (RFC 7628, KIP-255) with Kafka's default server-side validator, which takes
unsecured JWTs (RFC 7515 with "alg": "none" and no signature), so a test needs no identity provider.

As Kafka's OAuthBearerSaslServer, OAuthBearerClientInitialResponse,
OAuthBearerUnsecuredValidatorCallbackHandler, OAuthBearerUnsecuredJws and OAuthBearerValidationUtils:

- the client's first message is `n,[a=<authzid>],^Aauth=Bearer <token>^A[<key>=<value>^A]*^A`; the
  extensions (key=value) are all accepted, as the unsecured validator accepts them;
- the token is three dot-separated base64 parts: a header with "alg": "none", the claims, and an empty
  signature. The principal is the claim named by `unsecuredValidatorPrincipalClaimName` (default
  "sub"), which must be a non-empty string; "exp" (seconds, a number) is required and must be later
  than now minus `unsecuredValidatorAllowableClockSkewMs` (default 0); "iat", when present, no later
  than now plus the skew, and before "exp"; every scope of `unsecuredValidatorRequiredScope`
  (space-separated) must be in the claim named by `unsecuredValidatorScopeClaimName` (default
  "scope": a string or a list of strings);
- a token that fails is answered with a JSON error challenge ({"status":"invalid_token"}, or
  "insufficient_scope" with "scope"), the client answers with a single 0x01 byte, and the exchange
  fails with that JSON as the message; a requested authorization id that is not the token's
  principal fails at once;
- the token's expiry is the credential lifetime KIP-368 caps the session with (minibroker.sasl).

The options come from the listener's `listener.name.<l>.oauthbearer.sasl.jaas.config`
(OAuthBearerLoginModule required unsecuredValidatorRequiredScope="test" ...;). Kafka decodes the
parts with Java's basic base64 decoder; base64url (what RFC 7515 specifies) is read as well.

Pure: the current time is given (`now_ms`), nothing here reads a clock.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

__all__ = ["OAuthBearerServer", "UnsecuredValidatorOptions", "client_initial_response", "unsecured_token"]

SEPARATOR = "\x01"
# Kafka's SASLNAME, (?:[\x01-\x7F&&[^=,]]|=2C|=3D)+, without Java's class intersection.
_SASLNAME_PY = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"
_KEY = r"[A-Za-z]+"
_VALUE = r"[\x21-\x7E \t\r\n]+"
_KVPAIRS = f"(?:{_KEY}={_VALUE}{SEPARATOR})*"
_INITIAL_RESPONSE = re.compile(f"n,(?:a=(?P<authzid>{_SASLNAME_PY}))?,{SEPARATOR}(?P<kvpairs>{_KVPAIRS}){SEPARATOR}",
                               re.DOTALL)
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)")
_SCOPE_ITEM = re.compile(r"[\x23-\x5B\x5D-\x7E\x21]+")


class OAuthBearerFailure(Exception):
    """The exchange failed; the message goes to the client (SaslAuthenticationFailed in minibroker.sasl)."""


class InvalidToken(Exception):
    """A token the validator refuses (OAuthBearerIllegalTokenException): its reason, and the scope
    it lacked for an insufficient_scope answer."""

    def __init__(self, reason: str, scope: str | None = None) -> None:
        super().__init__(reason)
        self.scope = scope


@dataclass(frozen=True)
class UnsecuredValidatorOptions:
    """The unsecuredValidator* JAAS options."""

    principal_claim: str = "sub"
    scope_claim: str = "scope"
    required_scope: tuple[str, ...] = ()
    allowable_clock_skew_ms: int = 0

    @classmethod
    def from_jaas(cls, options: Mapping[str, str]) -> UnsecuredValidatorOptions:
        """From a JAAS module's options; ValueError naming the option when one is invalid."""
        skew_text = options.get("unsecuredValidatorAllowableClockSkewMs", "").strip()
        try:
            skew = int(skew_text) if skew_text else 0
        except ValueError:
            raise ValueError(f"unsecuredValidatorAllowableClockSkewMs: expected an integer, got {skew_text!r}") from None
        if skew < 0:
            raise ValueError(f"Allowable clock skew millis must not be negative: {skew_text}")
        scope: list[str] = []
        for item in options.get("unsecuredValidatorRequiredScope", "").strip().split(" "):
            if item and not _SCOPE_ITEM.fullmatch(item):
                raise ValueError(f"Invalid scope value: {item}")
            if item:
                scope.append(item)
        return cls(options.get("unsecuredValidatorPrincipalClaimName", "").strip() or "sub",
                   options.get("unsecuredValidatorScopeClaimName", "").strip() or "scope",
                   tuple(scope), skew)


@dataclass
class UnsecuredJws:
    """A validated token: its principal, its expiry (ms) and its claims."""

    principal: str
    lifetime_ms: int
    start_ms: int | None
    scope: frozenset[str]
    claims: dict[str, Any] = field(default_factory=dict)


def _decode_part(part: str) -> dict[str, Any]:
    try:
        raw = base64.b64decode(part.replace("-", "+").replace("_", "/") + "=" * (-len(part) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidToken("malformed Base64 URL encoded value") from None
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise InvalidToken("malformed JSON") from None
    if not isinstance(value, dict):
        raise InvalidToken("malformed JSON")
    return value


def _number(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidToken(f"The '{name}' claim was not of type Number: {_java_type(value)}")
    return float(value)


def _java_type(value: Any) -> str:
    return {str: "String", list: "ArrayList", bool: "Boolean", dict: "ObjectNode"}.get(type(value), "Number")


def parse_unsecured_jws(token: str, options: UnsecuredValidatorOptions, now_ms: int) -> UnsecuredJws:
    """OAuthBearerUnsecuredJws plus the validator's checks; InvalidToken with Kafka's reason."""
    if ".." in token:
        raise InvalidToken("Malformed compact serialization contains '..'")
    splits = token.split(".")
    if len(splits) != 3:
        raise InvalidToken("Unsecured JWS compact serializations must have 3 dot-separated Base64URL-encoded values")
    header, claims = _decode_part(splits[0]), _decode_part(splits[1])
    if header.get("alg") is None:
        raise InvalidToken("JWS header must have an Algorithm value")
    if str(header["alg"]) != "none":
        raise InvalidToken("Unsecured JWS must have 'none' for an algorithm")
    if splits[2]:
        raise InvalidToken("Unsecured JWS must not contain a digital signature")
    scope = _scope(claims, options.scope_claim)
    expiry = _number(claims, "exp")
    if expiry is None:
        raise InvalidToken("No expiration time in JWT")
    principal = claims.get(options.principal_claim)
    if principal is not None and not isinstance(principal, str):
        raise InvalidToken(f"The '{options.principal_claim}' claim was not of type String: {_java_type(principal)}")
    if principal is None or not principal.strip():
        raise InvalidToken(f"No principal name in JWT claim: {options.principal_claim}")
    issued = _number(claims, "iat")
    skew = options.allowable_clock_skew_ms
    if issued is not None and 1000 * issued > now_ms + skew:
        raise InvalidToken(f"The Issued At value ({issued:f} seconds) was after the indicated time ({now_ms} ms) plus "
                           f"allowable clock skew ({skew} ms)")
    if now_ms - skew >= 1000 * expiry:
        raise InvalidToken(f"The indicated time ({now_ms} ms) minus allowable clock skew ({skew} ms) was on or after "
                           f"the Expiration Time value ({expiry:f} seconds)")
    if issued is not None and expiry <= issued:
        raise InvalidToken(f"The Expiration Time time ({expiry:f} seconds) was not after the Issued At time "
                           f"({issued:f} seconds)")
    for required in options.required_scope:
        if required not in scope:
            wanted = "[" + ", ".join(options.required_scope) + "]"
            raise InvalidToken(f"The provided scope ([{', '.join(sorted(scope))}]) was missing a required scope "
                               f"({required}).  All required scope elements: {wanted}", wanted)
    return UnsecuredJws(principal, round(expiry * 1000), None if issued is None else round(issued * 1000),
                        frozenset(scope), claims)


def _scope(claims: Mapping[str, Any], name: str) -> set[str]:
    value = claims.get(name)
    if isinstance(value, str):
        return {value.strip()} if value.strip() else set()
    if value is None:
        return set()
    if not isinstance(value, list):
        raise InvalidToken(f"The '{name}' claim was not of type List: {_java_type(value)}")
    return {str(item).strip() for item in value if str(item).strip()}


class OAuthBearerServer:
    """One OAUTHBEARER exchange (Kafka's OAuthBearerSaslServer with the unsecured validator)."""

    mechanism = "OAUTHBEARER"

    def __init__(self, options: UnsecuredValidatorOptions, now_ms: Callable[[], int]) -> None:
        self.options = options
        self._now_ms = now_ms
        self.complete = False
        self.authorization_id: str | None = None
        self.credential_expiry_ms: int | None = None  # the token's exp, for KIP-368
        self.extensions: dict[str, str] = {}
        self._error: str | None = None

    def evaluate(self, response: bytes) -> bytes:
        if response == SEPARATOR.encode() and self._error is not None:
            raise OAuthBearerFailure(self._error)
        self._error = None
        if self.complete:
            raise OAuthBearerFailure("Authentication failed: unexpected token after completion")
        token, authzid, extensions = _initial_response(response)
        try:
            jws = parse_unsecured_jws(token, self.options, self._now_ms())
        except InvalidToken as exc:
            status = "insufficient_scope" if exc.scope is not None else "invalid_token"
            error = f'{{"status":"{status}"' + (f', "scope":"{exc.scope}"' if exc.scope is not None else "") + "}"
            self._error = error
            self.reason = str(exc)  # for the broker's log, never for the client
            return error.encode()
        if authzid and authzid != jws.principal:
            raise OAuthBearerFailure(f"Authentication failed: Client requested an authorization id ({authzid}) that "
                                     f"is different from the token's principal name ({jws.principal})")
        self.extensions = extensions
        self.authorization_id = jws.principal
        self.credential_expiry_ms = jws.lifetime_ms
        self.complete = True
        return b""


def _initial_response(response: bytes) -> tuple[str, str, dict[str, str]]:
    """(token, authorization id, extensions) of a client's first message (OAuthBearerClientInitialResponse)."""
    try:
        text = response.decode("utf-8")
    except UnicodeDecodeError:
        raise OAuthBearerFailure(_generic()) from None
    matched = _INITIAL_RESPONSE.fullmatch(text)
    if matched is None:
        raise OAuthBearerFailure(_generic())  # Kafka: "Invalid OAUTHBEARER client first message"
    pairs: dict[str, str] = {}
    for pair in matched.group("kvpairs").split(SEPARATOR):
        if pair:
            key, _, value = pair.partition("=")
            pairs[key] = value
    auth = pairs.pop("auth", None)
    if auth is None:
        raise OAuthBearerFailure(_generic())
    found = _AUTH.fullmatch(auth)
    if found is None or found.group("scheme").lower() != "bearer":
        raise OAuthBearerFailure(_generic())
    authzid = (matched.group("authzid") or "").replace("=2C", ",").replace("=3D", "=")
    return found.group("token"), authzid, pairs


def _generic() -> str:
    # A SaslException: the client is told only this (SaslServerAuthenticator).
    return "Authentication failed during authentication due to invalid credentials with SASL mechanism OAUTHBEARER"


# ---- the client side, for tests and the command-line tools ----------------------------------------


def _b64url(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode()).decode().rstrip("=")


def unsecured_token(principal: str, *, now_ms: int, lifetime_ms: int = 3600_000, scope: tuple[str, ...] = (),
                    claims: Mapping[str, Any] | None = None) -> str:
    """An unsecured JWT as Kafka's OAuthBearerUnsecuredLoginCallbackHandler makes one."""
    body: dict[str, Any] = {"sub": principal, "iat": now_ms / 1000, "exp": (now_ms + lifetime_ms) / 1000}
    if scope:
        body["scope"] = list(scope)
    body.update(claims or {})
    return f"{_b64url({'alg': 'none'})}.{_b64url(body)}."


def client_initial_response(token: str, authorization_id: str = "", extensions: Mapping[str, str] | None = None) -> bytes:
    authzid = f"a={authorization_id}" if authorization_id else ""
    ext = "".join(f"{SEPARATOR}{k}={v}" for k, v in (extensions or {}).items())
    return f"n,{authzid},{SEPARATOR}auth=Bearer {token}{ext}{SEPARATOR}{SEPARATOR}".encode()
