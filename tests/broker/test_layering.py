"""The layering the developers' guide draws, as one contract over the source (import-linter style):

* dependency direction: minibroker -> {storage, quotas} -> protocol; the reference producer
  (producer/) speaks protocol only; pipeline/ reads what the broker wrote (storage, protocol) and
  replays quotas; nothing imports pipeline/, scripts/ or tests/;
* the core (protocol/, storage/, quotas/, producer/) imports neither trio nor minibroker;
* only the shells read a clock or sleep: minibroker/ (the broker's) and producer/client.py (the
  reference producer's socket driver, which is to minibroker.producer.core what minibroker/ is to the core);
  pipeline/ may time its own runs for its report, as a tool;
* inside the broker's shell, time is the broker clock's (minibroker/clock.py): no other module calls
  trio's time (trio.sleep, sleep_until, current_time, move_on_after/at, fail_after/at, a
  CancelScope with a deadline), so every sleep and deadline of a broker moves with its clock.

The imports are read from the source (every `import` and `from ... import`, wherever it stands), so
the check does not depend on what happens to be installed. A runtime check then imports the core in
a fresh interpreter and finds neither trio nor minibroker loaded. Hypothesis is kept out there, as
it is out of a broker's installation: kio (for the error codes) registers strategies with it when it
is there, and importing hypothesis imports trio (trio's hypothesis plugin).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIRST_PARTY = ("protocol", "storage", "quotas", "minibroker", "producer", "pipeline", "scripts", "tests")

# package -> the first-party packages (and trio) it may import besides itself
ALLOWED: dict[str, set[str]] = {
    "protocol": set(),
    "storage": {"protocol"},
    "quotas": {"protocol"},
    "producer": {"protocol"},
    "pipeline": {"protocol", "storage", "quotas"},
    "minibroker": {"protocol", "storage", "quotas", "trio"},
}
CORE = ("protocol", "storage", "quotas", "producer")
CLOCK_READERS = {("time", name) for name in (
    "time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "sleep",
)} | {("datetime", "now"), ("datetime", "utcnow"), ("datetime", "today"), ("date", "today"),
      ("trio", "current_time"), ("trio", "sleep")}
MAY_READ_A_CLOCK = ("minibroker/", "producer/client.py", "pipeline/")


TRIO_TIME = ("sleep", "sleep_until", "current_time", "move_on_after", "move_on_at", "fail_after", "fail_at")
THE_CLOCK = "minibroker/clock.py"


def sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


LAYERS = ("protocol", "storage", "quotas", "producer", "pipeline")


def layer_of(module: str) -> str:
    """The layer a module belongs to: `minibroker.storage.log` -> storage (the build maps each
    layer's folder under `minibroker`), `minibroker.server` -> minibroker, `trio.lowlevel` -> trio."""
    parts = module.split(".")
    if parts[0] == "minibroker" and len(parts) > 1 and parts[1] in LAYERS:
        return parts[1]
    return parts[0]


def imported_packages(tree: ast.AST) -> set[str]:
    """The layer of every module `tree` imports (relative imports are its own)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(layer_of(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "minibroker":  # from minibroker import storage
                found.update(layer_of(f"minibroker.{alias.name}") for alias in node.names)
            else:
                found.add(layer_of(node.module))
    return found


def test_layers_are_imported_by_their_installed_name_only():
    """`minibroker.storage`, never the folder's bare name `storage`: the bare name works only inside
    the repository, and would load a second copy of the module beside the installed one."""
    bare = []
    for path in sorted(ROOT.rglob("*.py")):
        if any(part in (".venv", ".cache", "build", ".git") for part in path.relative_to(ROOT).parts):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                     else [])
            bare += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names if n.split(".")[0] in LAYERS]
    assert bare == []


def clock_reads(tree: ast.AST) -> list[str]:
    """`time.monotonic()`-style calls, and such names imported `from time import ...`."""
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if (node.value.id, node.attr) in CLOCK_READERS:
                hits.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module in ("time", "trio", "datetime"):
            hits += [f"line {node.lineno}: from {node.module} import {alias.name}"
                     for alias in node.names if (node.module, alias.name) in CLOCK_READERS]
    return hits


def trio_time_calls(tree: ast.AST) -> list[str]:
    """trio's own time: `trio.sleep`-style uses, such names imported `from trio import ...`, and a
    CancelScope given a deadline (`trio.CancelScope(deadline=...)` or after `from trio import
    CancelScope`)."""
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "trio":
            if node.attr in TRIO_TIME:
                hits.append(f"line {node.lineno}: trio.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "trio":
            hits += [f"line {node.lineno}: from trio import {alias.name}"
                     for alias in node.names if alias.name in TRIO_TIME]
        elif isinstance(node, ast.Call) and any(k.arg == "deadline" for k in node.keywords):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name == "CancelScope":
                hits.append(f"line {node.lineno}: CancelScope(deadline=...)")
    return sorted(hits, key=lambda hit: int(hit.split()[1].rstrip(":")))


def test_the_shell_keeps_time_on_the_broker_clock():
    """Every sleep and deadline of the shell goes through minibroker.clock.BrokerClock, so that moving
    one broker's clock (BrokerClock.advance) moves everything that waits on it."""
    calls = []
    for path in sources("minibroker"):
        relative = str(path.relative_to(ROOT))
        if relative != THE_CLOCK:
            calls += [f"{relative} {hit}" for hit in trio_time_calls(ast.parse(path.read_text(), relative))]
    assert calls == []


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_each_package_imports_only_what_its_layer_may(package):
    allowed = ALLOWED[package] | {package}
    broken = []
    for path in sources(package):
        tree = ast.parse(path.read_text(), str(path))
        for imported in sorted(imported_packages(tree)):
            if (imported in FIRST_PARTY or imported == "trio") and imported not in allowed:
                broken.append(f"{path.relative_to(ROOT)} imports {imported}")
    assert broken == []


@pytest.mark.parametrize("package", CORE)
def test_the_core_reads_no_clock(package):
    reads = []
    for path in sources(package):
        relative = str(path.relative_to(ROOT))
        if relative.startswith(MAY_READ_A_CLOCK):
            continue
        reads += [f"{relative} {hit}" for hit in clock_reads(ast.parse(path.read_text(), relative))]
    assert reads == []


def test_the_checks_see_what_they_look_for():
    """The contract's own detectors find the forms they must find (so an empty answer above means
    there is nothing, not that nothing was looked at)."""
    tree = ast.parse("import trio.lowlevel\nfrom minibroker.broker import Broker\nimport time\n"
                     "from time import monotonic\nx = time.time_ns()\ny = datetime.now()\n"
                     "import minibroker.storage.log\nfrom minibroker.quotas.rate import Rate\n"
                     "from minibroker import protocol\n")
    assert imported_packages(tree) == {"trio", "minibroker", "time", "storage", "quotas", "protocol"}
    assert clock_reads(tree) == ["line 4: from time import monotonic", "line 5: time.time_ns",
                                 "line 6: datetime.now"]
    trio_time = ast.parse("import trio\nfrom trio import sleep_until, Event\nx = trio.sleep(1)\n"
                          "with trio.move_on_after(2):\n    pass\nx = trio.current_time()\n"
                          "s = trio.CancelScope(deadline=3)\nt = trio.CancelScope()\nu = CancelScope(deadline=4)\n"
                          "with trio.fail_at(5):\n    pass\n")
    assert trio_time_calls(trio_time) == [
        "line 2: from trio import sleep_until", "line 3: trio.sleep", "line 4: trio.move_on_after",
        "line 6: trio.current_time", "line 7: CancelScope(deadline=...)", "line 9: CancelScope(deadline=...)",
        "line 10: trio.fail_at"]


def test_importing_the_core_loads_neither_trio_nor_the_broker():
    modules = sorted(
        "minibroker." + ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for package in CORE for path in sources(package)
        if path.name != "client.py" or package != "producer"  # the producer's driver: sockets, fine
    )
    layers = tuple(f"minibroker.{layer}" for layer in CORE)
    code = (
        f"import sys\nsys.modules['hypothesis'] = None\nimport {', '.join(modules)}\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] == 'trio' or (m.startswith('minibroker.')"
        f" and not m.startswith({layers!r}))))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                            timeout=120, check=True)
    assert result.stdout.strip() == "[]"
