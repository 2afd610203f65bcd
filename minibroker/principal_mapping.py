"""The principal of an SSL client: `ssl.principal.mapping.rules` applied to its certificate's subject
(Kafka's SslPrincipalMapper and DefaultKafkaPrincipalBuilder).

The subject is the distinguished name in RFC 2253 form, as Java's X500Principal.getName() writes it
(most specific first: "CN=alice,OU=eng,O=example,C=GB"). Rules are tried in order:

    DEFAULT                         the whole name
    RULE:pattern/replacement/       when the Java regular expression matches the whole name, the
    RULE:pattern/replacement/L      name with every match replaced ($1... are the groups), then
    RULE:pattern/replacement/U      made lower (L) or upper (U) case

separated by commas (a comma, '/' or '\\' inside a pattern or replacement is escaped with '\\'); the
first rule that applies names the principal, `User:<name>`. When none applies the connection fails,
as Kafka's NoMatchingRule does. A client with no certificate (ssl.client.auth none or requested) is
User:ANONYMOUS.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["NoMatchingRule", "SslPrincipalMapper", "subject_name"]

# Kafka's RULE_PATTERN: DEFAULT, or RULE:pattern/replacement/[LU], or (anything else) an empty rule.
_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_PARSER = re.compile(_RULE)


class NoMatchingRule(ValueError):
    """No rule names the certificate's subject (the connection is refused)."""


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if not self.pattern.fullmatch(name):
            return None
        result = self.pattern.sub(lambda m: _expand(self.replacement, m), name)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        return f"RULE:{self.pattern.pattern}/{self.replacement}" + (f"/{self.case}" if self.case else "")


def _expand(replacement: str, match: re.Match) -> str:
    """Java's Matcher.appendReplacement after Kafka's escapeLiteralBackReferences: `$n` is group n,
    read digit by digit while the number stays a group (so with one group `$12` is group 1 then
    "2"), and a `$` whose first digit is no group is literal; a backslash quotes the next character."""
    groups = match.re.groups
    out: list[str] = []
    i, n = 0, len(replacement)
    while i < n:
        ch = replacement[i]
        if ch == "\\" and i + 1 < n:
            out.append(replacement[i + 1])
            i += 2
        elif ch == "$" and i + 1 < n and replacement[i + 1].isdigit() and int(replacement[i + 1]) <= groups:
            ref, i = int(replacement[i + 1]), i + 2
            while i < n and replacement[i].isdigit() and ref * 10 + int(replacement[i]) <= groups:
                ref, i = ref * 10 + int(replacement[i]), i + 1
            out.append(match.group(ref) or "")
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _java_regex(pattern: str) -> re.Pattern:
    """A rule's Java regular expression in Python's syntax (the two agree on what rules use: classes,
    groups, quantifiers, anchors); a pattern Python cannot read is a config error."""
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid pattern {pattern!r} in ssl.principal.mapping.rules: {exc}") from None


class SslPrincipalMapper:
    def __init__(self, rules: str | None) -> None:
        text = "DEFAULT" if rules is None else rules
        self.rules: list[_Rule] = []
        for rule in (m.group(1) for m in _SPLITTER.finditer(text.strip())):
            matched = _PARSER.match(rule)
            if matched is None or matched.end() != len(rule):
                raise ValueError(f"invalid rule {rule!r} in ssl.principal.mapping.rules")
            if matched.group(1) is not None:
                self.rules.append(_Rule(None))
            elif matched.group(2) is not None:
                self.rules.append(_Rule(_java_regex(matched.group(2)), matched.group(4), matched.group(6) or ""))
            # anything else is an empty rule, ignored (Kafka's)

    def name(self, distinguished_name: str) -> str:
        """The principal name for a certificate subject; NoMatchingRule when no rule applies."""
        for rule in self.rules:
            found = rule.apply(distinguished_name)
            if found is not None:
                return found
        raise NoMatchingRule(f"No rules apply to {distinguished_name}, rules [{', '.join(map(str, self.rules))}]")

    def __repr__(self) -> str:
        return f"SslPrincipalMapper(rules = [{', '.join(map(str, self.rules))}])"


def subject_name(der_certificate: bytes) -> str:
    """The subject of a DER certificate in RFC 2253 form, as Java's X500Principal.getName() gives it."""
    from cryptography import x509

    return x509.load_der_x509_certificate(der_certificate).subject.rfc4514_string()
