"""`sasl.jaas.config` values: Kafka's inline JAAS configuration (Kafka's JaasConfig).

One login module: `<class> <flag> [<option>=<value> ...];`, the flag one of required, requisite,
sufficient, optional, a value a bare word or a double-quoted string (backslash escapes the next
character). The broker reads the options of the modules it knows: PLAIN's `user_<name>="<password>"`
(the listener's PLAIN users, as Kafka's PlainServerCallbackHandler reads them), OAUTHBEARER's
`unsecuredValidator*` (minibroker.oauthbearer), and, in the command-line tools' client properties,
`username` and `password`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["JaasConfig", "parse_jaas_config"]

FLAGS = ("required", "requisite", "sufficient", "optional")


@dataclass(frozen=True)
class JaasConfig:
    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)

    def plain_users(self) -> dict[str, str]:
        """PLAIN's users: every `user_<name>` option (PlainServerCallbackHandler)."""
        return {key[len("user_"):]: value for key, value in self.options.items() if key.startswith("user_")}


def _tokens(text: str) -> list[tuple[str, str]]:
    """("word"|"string"|"=" |";", text) tokens; ValueError on an unterminated string."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "=;":
            out.append((ch, ch))
            i += 1
        elif ch == '"':
            i += 1
            chars = []
            while i < n and text[i] != '"':
                if text[i] == "\\" and i + 1 < n:
                    i += 1
                chars.append(text[i])
                i += 1
            if i >= n:
                raise ValueError("a quoted value is not closed")
            out.append(("string", "".join(chars)))
            i += 1
        else:
            start = i
            while i < n and not text[i].isspace() and text[i] not in '=;"':
                i += 1
            out.append(("word", text[start:i]))
    return out


def parse_jaas_config(text: str) -> JaasConfig | None:
    """The one login module of a sasl.jaas.config value (None when it is empty); ValueError with
    Kafka's reason when it is malformed."""
    tokens = _tokens(text)
    if not tokens:
        return None
    if tokens[-1][0] != ";":
        raise ValueError("the JAAS configuration must end with ';'")
    if sum(1 for kind, _ in tokens if kind == ";") != 1:
        raise ValueError("JAAS config property contains more than one login module; exactly one is expected")
    if len(tokens) < 3 or tokens[0][0] != "word" or tokens[1][0] != "word":
        raise ValueError("expected '<LoginModule class> <flag> [<option>=<value> ...];'")
    module, flag = tokens[0][1], tokens[1][1].lower()
    if flag not in FLAGS:
        raise ValueError(f"invalid login module control flag {tokens[1][1]!r} (one of {', '.join(FLAGS)})")
    options: dict[str, str] = {}
    rest = tokens[2:-1]
    if len(rest) % 3:
        raise ValueError("expected <option>=<value> pairs after the flag")
    for at in range(0, len(rest), 3):
        (kind_key, key), (kind_eq, _), (kind_value, value) = rest[at:at + 3]
        if kind_key != "word" or kind_eq != "=" or kind_value not in ("word", "string"):
            raise ValueError(f"expected <option>=<value>, got {' '.join(t for _, t in rest[at:at + 3])!r}")
        options[key] = value
    return JaasConfig(module, flag, options)
