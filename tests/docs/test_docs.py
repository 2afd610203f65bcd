"""The documentation: the site builds with warnings as errors (a broken link or anchor, a page left
out of the nav), every internal link and anchor of the built site resolves, the configuration page
lists every setting the broker accepts, no page names an issue number, the README fits on two
screens, and the getting-started and testing pages run as written."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from tests.support.doc_commands import blocks

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site as scripts/docs builds it (mkdocs build --strict), into a temporary directory."""
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                             str(ROOT / "mkdocs.yml"), "--site-dir", str(out)],
                            cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    return out


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"])
        if tag == "a" and values.get("href"):
            self.links.append(values["href"])


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text())
    return page


def test_every_internal_link_and_anchor_resolves(site):
    pages = {path: _parse(path) for path in site.rglob("*.html")}
    broken = []
    for path, page in pages.items():
        for href in page.links:
            parts = urlsplit(href)
            if parts.scheme or parts.netloc or href.startswith("mailto:"):
                continue
            if parts.path.startswith("/"):  # site-absolute (the 404 page's links)
                target = (site / unquote(parts.path).lstrip("/")).resolve()
            else:
                target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if target.is_dir() or not target.suffix:
                target = target / "index.html"
            if target not in pages:
                if not target.exists():
                    broken.append(f"{path.relative_to(site)}: {href} (no such page)")
                continue
            if parts.fragment and unquote(parts.fragment) not in pages[target].ids:
                broken.append(f"{path.relative_to(site)}: {href} (no such anchor)")
    assert not broken, "\n".join(broken)
    assert len(pages) > 20


def _accepted_settings() -> set[str]:
    """Every key the broker accepts, from the definitions themselves (not from the page's generator)."""
    from minibroker.config import BROKER_CONFIGS, CALLBACK_CONFIG_PREFIX, LISTENER_CONFIG_PREFIX, LISTENER_KEYS
    from minibroker.storage.config import BROKER_LOG_KEYS, TOPIC_CONFIGS

    keys = set(BROKER_CONFIGS) | set(BROKER_LOG_KEYS) | set(TOPIC_CONFIGS)
    keys |= {f"{LISTENER_CONFIG_PREFIX}<listener>.{name}" for name in LISTENER_KEYS}
    keys.add(f"{CALLBACK_CONFIG_PREFIX}*")
    return keys


def test_the_configuration_page_lists_every_setting_with_default_and_dynamic(site):
    from minibroker.config import BROKER_CONFIGS
    from minibroker.dynamic_config import DYNAMIC_KEYS

    page = (site / "configuration" / "index.html").read_text()
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", page, re.S):
        cells = [re.sub(r"<[^>]+>", "", cell).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&").strip()
                 for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        if cells:
            rows.setdefault(cells[0], cells)
    missing = sorted(_accepted_settings() - set(rows))
    assert not missing, f"settings the broker accepts but the configuration page lacks: {missing}"
    for name, key in BROKER_CONFIGS.items():
        _, default, dynamic, _ = rows[name]
        assert default == (key.default or "(none)"), name
        assert dynamic == ("yes" if name in DYNAMIC_KEYS else "no"), name
    assert rows["log.retention.ms"][2] == "yes" and rows["log.retention.hours"][2] == "no"


# "issue 17", "issues 11 and 14", "#17" (not "pid#1"), "seed 003": reference quoted on purpose.
ISSUE_NUMBER = re.compile(r"\bissues?\s+#?\d+\b|(?<![\w#])#\d+\b|\bseeds?\s+\d{3}\b", re.IGNORECASE)


def test_no_page_refers_to_an_issue_number(site):
    """Documentation names the KIP or the design document, never an issue number or a seed's file
    number."""
    sources = [ROOT / "README.md", ROOT / "CHANGELOG.md", *DOCS.rglob("*.md")]
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in sources for number, line in enumerate(path.read_text().splitlines(), 1)
             if ISSUE_NUMBER.search(line)]
    built = [f"{path.relative_to(site)}: {match.group(0)}" for path in site.rglob("*.html")
             for match in ISSUE_NUMBER.finditer(re.sub(r"<[^>]+>", " ", path.read_text()))]
    assert not found + built, "\n".join(found + built)


def test_the_readme_fits_on_two_screens():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 250
    assert max(len(line) for line in lines) <= 120


def _own_network_namespace() -> bool:
    """Whether the page's commands can run in a network namespace of their own, where 127.0.0.1:9092,
    as the page writes it, is free whatever else runs on the machine (root, Linux)."""
    if not (shutil.which("unshare") and shutil.which("ip")):
        return False
    probe = subprocess.run(["unshare", "--net", "ip", "link", "set", "lo", "up"], capture_output=True)
    return probe.returncode == 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_getting_started_runs_as_written(tmp_path):
    """Every command of the page, in order, in a fresh directory, with what it printed compared to
    what the page shows (tests/support/doc_commands.py). In a network namespace of its own the page
    runs exactly as written, 127.0.0.1:9092 included; where none can be had, on a free port."""
    runner = ROOT / "tests" / "support" / "doc_commands.py"
    page = DOCS / "getting-started.md"
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("PYTHONPATH", None)
    if _own_network_namespace():
        command = ["unshare", "--net", "bash", "-c",
                   f'ip link set lo up && exec "{sys.executable}" "{runner}" "{page}" "{tmp_path}"']
    else:
        command = [sys.executable, str(runner), str(page), str(tmp_path), str(_free_port())]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    ran = result.stdout.splitlines()
    assert ran[:2] == ["pip install /path/to/minibroker", "minibroker serve"]
    assert "python hello.py" in ran and ran[-1] == "pytest -q test_hello.py"
    assert (tmp_path / "data" / "meta.properties").exists()  # the broker kept its data where the page says


def test_the_testing_pages_examples_run(tmp_path):
    """Each test file on the testing page and the README's and home page's example, as a user's suite
    (the plugin from the installed package), and the testing page's untitled snippets as scripts."""
    found = [b for b in blocks((DOCS / "testing.md").read_text()) if b.lang == "python"]
    files = [b for b in found if b.title]
    assert len(files) >= 5 and all(b.title.startswith("test_") for b in files)
    for block in files:
        (tmp_path / block.title).write_text(block.text)
    for page, name in ((ROOT / "README.md", "test_readme"), (DOCS / "index.md", "test_index")):
        examples = [b for b in blocks(page.read_text()) if b.lang == "python"]
        assert examples and len(examples[0].text.splitlines()) <= 8  # the fixture in five lines (and imports)
        for i, example in enumerate(examples):
            (tmp_path / f"{name}_{i}.py").write_text(example.text)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error"],
                            cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]
    assert re.search(r"\b\d+ passed\b", result.stdout) and "failed" not in result.stdout
    for i, block in enumerate(b for b in found if not b.title):
        script = tmp_path / f"snippet_{i}.py"
        script.write_text(block.text)
        run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, env=env,
                             timeout=120)
        assert run.returncode == 0, run.stderr
