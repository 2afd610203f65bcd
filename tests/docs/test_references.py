"""Comments, docstrings, docs, help texts and messages name the KIP or the design document, never an
issue number: a reader of the tree has the KIPs and ../shared/design/seeds/ (the design documents,
named in docs/design-documents.md), not the project's issue tracker.

Every file of the tree (tracked, or new and not ignored) is read, whatever its kind: README.md,
CHANGELOG.md, docs/, the packages, scripts/, tests/, pyproject.toml, mkdocs.yml, the Java, Go and
Node clients' sources. A reference is (examples in test_a_reference_is_found below):

- an issue by its number, with or without "#", or an issue left unnamed;
- a design document by its file number in ../shared/design/seeds/ instead of its title, or "the
  seed" left unnamed (name KIP-936, the lean producer state proposal, ... as
  docs/design-documents.md does);
- a table the README no longer has (the README is two screens now: name the docs page holding it).

Numbers that are not issues never match: JIRA keys (KAFKA-12345), KIP numbers, error codes, tags.
What does match and is not an issue is allowed below, each with its reason.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

REFERENCE = re.compile(r"""
    \bissues?[\s_-]*\#?\d+                   # an issue by number, one or several
  | (?<![\w#&/])\#\d+\b                      # a number after "#" (not pid#1, an HTML entity, a URL's)
  | \bseeds?[\s/_-]*\d{3}\b                  # a design document by its file number
  | \bthe\s+seed(?:'s)?\b                    # a design document left unnamed
  | \bthe\s+issue(?:'s)?\b                   # an issue left unnamed
  | \bwave\s+\d+\s+issue
  | README's\s+tables?|\(README\)|see\s+the\s+README|README\s+"
""", re.IGNORECASE | re.VERBOSE)

# Text that matches REFERENCE without referring to an issue, removed from a line before it is read.
ALLOWED = [
    re.compile(r"color:\s*#[0-9a-f]{3,8}\b", re.IGNORECASE),  # CSS colours (pipeline/report.py)
]

# A line that quotes references on purpose (this module's and test_docs.py's examples) says so with
# these words.
MARKER = "reference quoted on purpose"

# Not the project's text: build output and caches (only read when git cannot list the tree).
NOT_TEXT = {".git", ".venv", ".cache", "site", "data", "node_modules", "__pycache__", ".mypy_cache",
            ".ruff_cache", ".pytest_cache"}


def tree_files() -> list[Path]:
    """The tree's files: git's tracked and new unignored ones, or a walk of the tree without git."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                cwd=ROOT, capture_output=True, check=True, timeout=60).stdout
        return sorted({ROOT / name for name in listed.decode().split("\0") if name})
    except (OSError, subprocess.SubprocessError):
        return sorted(path for path in ROOT.rglob("*")
                      if path.is_file() and not NOT_TEXT & set(path.relative_to(ROOT).parts))


def references(text: str) -> list[tuple[int, str, str]]:
    """(line number, what matched, the line) for each reference in a file's text."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if MARKER in line:
            continue
        read = line
        for allowed in ALLOWED:
            read = allowed.sub(" ", read)
        found += [(number, match.group(0), line.strip()) for match in REFERENCE.finditer(read)]
    return found


def _text(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):  # deleted but still tracked; a submodule
        return None
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def test_no_file_in_the_tree_refers_to_an_issue_number():
    files = tree_files()
    assert any(path.name == "README.md" for path in files) and len(files) > 100, files[:5]
    found = []
    for path in files:
        text = _text(path)
        if text is not None:
            found += [f"{path.relative_to(ROOT)}:{number}: [{what}] {line[:160]}"
                      for number, what, line in references(text)]
    assert not found, ("name the KIP, the design document or the docs page instead "
                       "(docs/design-documents.md):\n" + "\n".join(found))


@pytest.mark.parametrize("line", [
    "# Issue 17: a large log is replayed now",  # reference quoted on purpose
    "records left in place (issue 17).",  # reference quoted on purpose
    "with issue 11's connection limits",  # reference quoted on purpose
    "the issue-11 rule: a damaged file",  # reference quoted on purpose
    "issues 11 and 14",  # reference quoted on purpose
    "see #17 for the figures",  # reference quoted on purpose
    "(KIP-257, seed 004, scenario 1)",  # reference quoted on purpose
    "../shared/design/seeds/003",  # reference quoted on purpose
    "DEFAULT_LAYER_COUNT = 4  # the seed's worked example",  # reference quoted on purpose
    "- the issue's DONE criterion: a loop",  # reference quoted on purpose
    "a wave 2 issue asked for it",  # reference quoted on purpose
    "(README \"Limits and failure behaviour\")",  # reference quoted on purpose
    "a difference on purpose (README).",  # reference quoted on purpose
    "each cell of the README's table is observed",  # reference quoted on purpose
])
def test_a_reference_is_found(line):
    assert references(line)


@pytest.mark.parametrize("line", [
    "KAFKA-12345 and KAFKA-16308 (JIRA keys)",
    "KIP-936's worked example; the lean producer state proposal",
    "pid#1, member#1, uuid#1 in a recording; &#39; in HTML",
    "body { color: #222; } .note { color: #555; }",
    "rng = np.random.default_rng(seed)  # seeds 0-3",
    "MurmurHash3 x64-128 (mmh3, seed 0)",
    "To avoid issues it is best to use either, but not both.",
    "OUT_OF_ORDER_SEQUENCE_NUMBER (45), tag 19778, Produce v13",
    "see docs/clients.md's table",
])
def test_what_is_not_an_issue_is_not_found(line):
    assert not references(line)
