"""MkDocs hook: the configuration page's tables, generated from the broker's own config definitions at
build time, so the page cannot drift from what the broker accepts.

`docs/configuration.md` holds the marker `<!-- settings-reference -->`; this hook replaces it with
three tables: the broker settings (minibroker.config.BROKER_CONFIGS, with their documentation), the
broker keys that set a topic config's default (minibroker.storage.config.TOPIC_CONFIGS' synonyms),
and the topic configs. Each row gives the Kafka name, the default and whether it can change while
the broker runs (minibroker.dynamic_config). `python docs/hooks/settings_reference.py` prints the
generated Markdown.
"""

from __future__ import annotations

MARKER = "<!-- settings-reference -->"

_UNITS = {1: "", 60_000: " (in minutes)", 3_600_000: " (in hours)"}


def _cell(text: str) -> str:
    """Table-safe text: on one line, pipes escaped, and `<`, `>`, `&` outside code spans as text (a
    documentation string's `<listener>` is not an HTML tag)."""
    parts = " ".join(str(text).split()).split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts).replace("|", "\\|")


def _default(value: str) -> str:
    return f"`{value}`" if value != "" else "(none)"


def reference() -> str:
    """The Markdown of the three tables."""
    from minibroker.config import BROKER_CONFIGS, CALLBACK_CONFIG_PREFIX, LISTENER_CONFIG_PREFIX, LISTENER_KEYS
    from minibroker.dynamic_config import DYNAMIC_KEYS
    from minibroker.storage.config import BROKER_KEY_DEFAULTS, TOPIC_CONFIGS, format_value

    def dynamic(key: str) -> str:
        return "yes" if key in DYNAMIC_KEYS else "no"

    lines = [
        "## Broker settings",
        "",
        "Set in a properties file (`--config`), with `--override key=value`, or as `running_broker()` / marker",
        "keywords with `_` for `.`. *Dynamic*: changes with AlterConfigs or IncrementalAlterConfigs on the",
        "broker resource while the broker runs ([Settings at runtime](#settings-at-runtime)).",
        "",
        "| Setting | Default | Dynamic | What it does |",
        "|---|---|---|---|",
    ]
    for name, key in BROKER_CONFIGS.items():
        lines.append(f"| `{name}` | {_default(key.default)} | {dynamic(name)} | {_cell(key.doc)} |")
    for name in LISTENER_KEYS:
        lines.append(f"| `{LISTENER_CONFIG_PREFIX}<listener>.{name}` | the value of `{name}` | no | "
                     f"`{name}` for one listener (its name in lower case: `plaintext`, `ssl`, `sasl_ssl`, ...), "
                     "as Kafka configures a listener. |")
    lines.append(f"| `{CALLBACK_CONFIG_PREFIX}*` | (none) | no | Settings of the quota callback named by "
                 "`client.quota.callback.class`, passed to its `configure` (KIP-257). |")

    lines += [
        "",
        "## Log settings: the broker's defaults of topic configs",
        "",
        "Each sets the default of a topic config for every topic without its own value. Where a topic",
        "config has several broker keys, the first one set wins (`log.retention.ms`, then",
        "`log.retention.minutes`, then `log.retention.hours`), as in Kafka.",
        "",
        "| Setting | Default | Dynamic | Default of the topic config |",
        "|---|---|---|---|",
    ]
    for definition in TOPIC_CONFIGS.values():
        for broker_key, factor in definition.broker_keys:
            default = BROKER_KEY_DEFAULTS.get(broker_key)
            shown = _default(default) if default is not None else f"(none: `{definition.name}`'s default applies)"
            lines.append(f"| `{broker_key}` | {shown} | {dynamic(broker_key)} | "
                         f"[`{definition.name}`](#topic-configs){_UNITS.get(factor, '')} |")

    lines += [
        "",
        "## Topic configs",
        "",
        "Per topic, with CreateTopics (`minibroker topics --create --config k=v`), AlterConfigs or",
        "IncrementalAlterConfigs; a topic config always changes at runtime. Its default is its broker",
        "key's value when that is set.",
        "",
        "| Topic config | Type | Default | Broker key |",
        "|---|---|---|---|",
    ]
    for name in sorted(TOPIC_CONFIGS):
        definition = TOPIC_CONFIGS[name]
        key = f"`{definition.broker_key}`" if definition.broker_key else "(none)"
        lines.append(f"| `{name}` | {definition.type} | {_default(format_value(definition, definition.default))} "
                     f"| {key} |")
    return "\n".join(lines) + "\n"


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 - MkDocs' hook signature
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, reference())


if __name__ == "__main__":
    print(reference(), end="")
