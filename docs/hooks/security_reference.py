"""MkDocs hook: the security page's two tables, generated at build time from the broker's own
definitions, so the page cannot drift from what the broker does.

`docs/security.md` holds two markers: `<!-- security-settings -->` becomes the table of every
security setting (minibroker.config.BROKER_CONFIGS: listeners, TLS, SASL, ACLs), with Kafka's name,
the default and what it does, then the per-listener and per-mechanism forms; `<!-- authorization-table -->`
becomes the table of what each API needs (minibroker/handlers/authorization.py, which the handlers
are tested against). `python docs/hooks/security_reference.py` prints both.
"""

from __future__ import annotations

SETTINGS_MARKER = "<!-- security-settings -->"
TABLE_MARKER = "<!-- authorization-table -->"

SECURITY_KEYS = (
    "listeners", "advertised.listeners", "listener.security.protocol.map", "sasl.enabled.mechanisms", "sasl.users",
    "connections.max.reauth.ms", "sasl.server.max.receive.size", "connection.failed.authentication.delay.ms",
    "connections.max.idle.ms",
)


def _cell(text: str) -> str:
    parts = " ".join(str(text).split()).split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts).replace("|", "\\|")


def _default(value: str) -> str:
    return f"`{value}`" if value != "" else "(none)"


def settings() -> str:
    from minibroker.config import BROKER_CONFIGS, LISTENER_CONFIG_PREFIX, MECHANISM_KEYS, SSL_KEYS

    names = [*SECURITY_KEYS, *SSL_KEYS, "authorizer.class.name", "super.users", "allow.everyone.if.no.acl.found"]
    lines = ["| Setting (Kafka's name) | Default | What it does |", "|---|---|---|"]
    for name in names:
        key = BROKER_CONFIGS[name]
        secret = " Sensitive: DescribeConfigs shows no value." if key.sensitive else ""
        lines.append(f"| `{name}` | {_default(key.default)} | {_cell(key.doc + secret)} |")
    lines.append(f"| `{LISTENER_CONFIG_PREFIX}<listener>.<setting>` | the setting's | Any `ssl.*` setting above, "
                 "`sasl.enabled.mechanisms`, `connections.max.reauth.ms` and `max.connection.creation.rate`, for "
                 "one listener (its name in lower case: `ssl`, `sasl_ssl`, `mtls`, ...), as Kafka configures a "
                 "listener. |")
    for name in MECHANISM_KEYS:
        what = {
            "sasl.jaas.config": "The JAAS configuration of one listener's mechanism: PLAIN's `user_NAME=\"PASSWORD\"` "
                                "users, OAUTHBEARER's `unsecuredValidator*` options. Sensitive.",
            "connections.max.reauth.ms": "`connections.max.reauth.ms` for one listener's mechanism.",
            "sasl.server.callback.handler.class": "OAUTHBEARER only: Kafka's unsecured validator (the default); "
                                                  "no other class is served.",
        }[name]
        lines.append(f"| `{LISTENER_CONFIG_PREFIX}<listener>.<mechanism>.{name}` | (none) | {_cell(what)} |")
    return "\n".join(lines) + "\n"


def authorization_table() -> str:
    from minibroker.handlers import load_all
    from minibroker.handlers.authorization import REQUIRED

    keys = {handler.api_name: handler.api_key for handler in load_all().values()}
    lines = ["| API (key) | Operation on resource | Refused with | When |", "|---|---|---|---|"]
    for api in sorted(REQUIRED, key=lambda name: keys.get(name, 1 << 15)):
        checks = REQUIRED[api]
        if not checks:
            lines.append(f"| {api} ({keys.get(api, '?')}) | none | | |")
            continue
        for i, check in enumerate(checks):
            label = f"{api} ({keys.get(api, '?')})" if i == 0 else ""
            refused = check.refused.name.upper() if check.refused is not None else "(left out / not refused)"
            lines.append(f"| {label} | {check.operation.name} on {check.of} ({check.resource.name}) | {refused} | "
                         f"{_cell(check.when)} |")
    return "\n".join(lines) + "\n"


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 - MkDocs' hook signature
    if SETTINGS_MARKER in markdown:
        markdown = markdown.replace(SETTINGS_MARKER, settings())
    if TABLE_MARKER in markdown:
        markdown = markdown.replace(TABLE_MARKER, authorization_table())
    return markdown


if __name__ == "__main__":
    print(settings())
    print(authorization_table(), end="")
